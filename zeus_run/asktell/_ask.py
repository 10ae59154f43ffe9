"""``ask``: reserve the next trial of a job whose training someone else launches.

The decision is the engine's (`zeus_run.engine.core.Ledger`), taken on the history
folded so far with the other asks in flight, under the rule ``concurrency: N``
uses: while pruning waits for a result, another ask gets the best known batch
size. The ask is recorded in ``running.json`` with everything the engine
decided (as a launcher records a trial in flight), so `zeus_run.engine.replay.audit`
re-derives it, and the trial's directory gets the agent's ``plan.json``
(`zeus-run exec` runs it).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zeus_run.asktell._keys import same_key, stamp
from zeus_run.asktell._session import Session, open_session, resolve_job
from zeus_run.contract import ASK_EXECUTOR, Env, RunningMarker, TrialFiles, expires_at
from zeus_run.energy import EstimatedEnergy, ask_reading
from zeus_run.errors import JOB_COMPLETE_EXIT_CODE, JobComplete, RunDirBusy, RunDirError
from zeus_run.executors import prepare
from zeus_run.rundir.settings import read_once
from zeus_run.spec import JobSpec
from zeus_run.trial.agent import AgentPlan

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ask:
    """One reserved trial: the decision and what the training side needs to run it.

    Attributes:
        token: The ask's token: `tell` and `heartbeat` name it.
        run_dir: The run directory.
        trial_dir: The trial's directory (events, output, ``plan.json``).
        recurrence: 1-based recurrence number.
        attempt: 1-based try within the recurrence (a retry after an early stop, a crash or an
            expired lease is the next try of the same recurrence).
        trial: 0-based trial number in the run.
        batch_size: Batch size to train with.
        learning_rate: Learning rate (scaled for the batch size), None if the job has none.
        power_limit: GPU power limit (unit: W), None when zeus-run does not set one.
        seed: The trial's seed.
        cost_threshold: Early-stop threshold (unit: J), None if none.
        max_epochs: Most epochs to train.
        target_metric: The metric that counts as converged.
        higher_is_better: Direction of the metric.
        stage: The optimizer stage that chose it.
        detail: The optimizer's reason (says so when it retries a recurrence).
        command: The spec's command with the placeholders filled in.
        env: The ``ZEUS_*`` environment `zeus_run.train.Trial` reads (with the ask's token and run directory).
        lease_s: The lease (unit: s): the ask expires this long after the last heartbeat.
        expires_at: When the lease runs out unless renewed (Unix time, unit: s).
        workdir: The absolute directory ``command`` runs in (the spec's ``workdir``; its paths are
            relative to it).
        curve_stop: The trial may also be stopped by its learning curve (`zeus_run.trial.stop.StopRule`).
    """

    token: str
    run_dir: Path
    trial_dir: Path
    recurrence: int
    attempt: int
    trial: int
    batch_size: int
    learning_rate: float | None
    power_limit: float | None
    seed: int
    cost_threshold: float | None
    max_epochs: int
    target_metric: float | None
    higher_is_better: bool
    stage: str
    detail: str
    command: list[str]
    env: dict[str, str]
    lease_s: float
    expires_at: float
    workdir: Path | None = None
    curve_stop: bool = False

    def to_json(self) -> dict[str, Any]:
        """What ``zeus-run ask --format json`` prints (``attempt`` also as ``try``)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["command"] = list(self.command)
        out["env"] = dict(self.env)
        out["run_dir"] = str(self.run_dir)
        out["trial_dir"] = str(self.trial_dir)
        out["workdir"] = None if self.workdir is None else str(self.workdir)
        out["try"] = self.attempt
        return out


def ask(
    job: str | Path,
    *,
    run_dir: str | Path | None = None,
    host: str | None = None,
    key: str | None = None,
    plan: bool = True,
) -> Ask:
    """Reserve the next trial of a job.

    Args:
        job: A job spec (YAML) or a run directory that has one.
        run_dir: The run directory, if not the spec's ``run_dir``.
        host: The host the ask is for (default: this one); shown in the expiry message.
        key: Idempotency key (`zeus_run.asktell._keys`): an ask in flight made with the same key is
            answered again (the same trial) instead of asking anew.
        plan: Write the agent's ``plan.json`` into the trial's directory, for ``zeus-run exec``. A server's
            asks write none: their trial directory is made by the first report or heartbeat, if any.

    Raises:
        SpecError, UsageError: The spec is invalid or ``job`` names nothing usable, or it exports to MLflow, which
            is not installed.
        RunDirError: The run directory cannot be used, or its history was recorded under other settings.
        RunDirBusy: A launcher holds the run directory, or ``concurrency`` asks are already in flight
            (or every recurrence left is).
        JobComplete: Every one of the spec's ``recurrences`` is done (``recurrences: null``: never).
        KeyReused: ``key`` made an ask in flight for another host.
    """
    stamped = None if key is None else stamp(key, "ask", {"host": host})
    with read_once():  # one ask: the run directory's spec.yaml is read once
        spec, path = resolve_job(job, run_dir)  # a spec: its history must have been recorded under its settings
        # The one opener (`zeus_run.door.open_job`): as `run` refuses before any trial, the spec's live exports must be
        # usable (MLflow installed), since this trial's tell will export it; a new job's spec kept, a rate change noted.
        with open_session(path, spec, role="ask") as s:
            s.expire()  # first: a retry of an ask whose lease ran out asks anew
            again = next((m for m in s.asks if same_key(m.request_key, stamped, "an ask")), None)
            if again is not None:
                return _asked_again(s, spec, again)
            return _reserve(s, spec, host or socket.gethostname(), stamped, plan)


def _asked_again(s: Session, spec: JobSpec, marker: RunningMarker) -> Ask:
    """The answer to a retried ask: the trial it made, as it was answered (its lease as it now stands)."""
    tdir = Path(marker.trial_dir or "")
    if not os.path.lexists(tdir / TrialFiles.PLAN):
        # A server's ask writes no plan (its client is the running script, which needs no command):
        # the answer again is the same trial, without a command to run.
        return _answer(spec, s.rd.path, marker, (), {}, expires_at(marker, spec.lease), spec.workdir)
    try:
        plan = AgentPlan.from_json(json.loads((tdir / TrialFiles.PLAN).read_text(encoding="utf-8"))).trial
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RunDirError(
            f"The trial of this ask (recurrence {marker.recurrence} try {marker.attempt}) has no readable "
            f"{TrialFiles.PLAN} ({type(exc).__name__}); ask with a new key."
        ) from None
    return _answer(spec, s.rd.path, marker, plan.argv, plan.env, expires_at(marker, spec.lease), plan.workdir)


def _answer(
    spec: JobSpec,
    run_dir: Path,
    marker: RunningMarker,
    argv: Sequence[str],
    env: Mapping[str, str],
    expires: float,
    workdir: str | Path,
) -> Ask:
    """The ask's answer from its marker and its trial's command and environment."""
    return Ask(
        token=marker.token or "",
        run_dir=run_dir,
        trial_dir=Path(marker.trial_dir or ""),
        recurrence=marker.recurrence,
        attempt=marker.attempt,
        trial=marker.trial,
        batch_size=marker.batch_size,
        learning_rate=marker.learning_rate,
        power_limit=None,
        seed=marker.seed if marker.seed is not None else spec.seed,
        cost_threshold=marker.cost_threshold,
        max_epochs=spec.max_epochs,
        target_metric=spec.target_metric,
        higher_is_better=spec.higher_is_better,
        stage=marker.stage,
        detail=marker.detail,
        command=list(argv),
        env=dict(env),
        lease_s=marker.lease if marker.lease is not None else spec.lease,
        expires_at=expires,
        workdir=Path(workdir).absolute(),
        curve_stop=marker.curve_stop,
    )


def _reserve(s: Session, spec: JobSpec, host: str, stamped: str | None, write_plan: bool) -> Ask:
    if len(s.asks) >= spec.concurrency:
        oldest = min(s.asks, key=lambda m: m.trial)
        raise RunDirBusy(
            f"Run directory {str(s.rd.path)!r} is busy: {len(s.asks)} ask(s) in flight and concurrency is "
            f"{spec.concurrency} (the oldest: recurrence {oldest.recurrence} try {oldest.attempt}, asked from "
            f"{oldest.host or '?'} at {oldest.started_at}). Nothing was asked (exit code 75); tell those back, wait "
            "for their lease to expire, or raise `concurrency` in the spec."
        )
    request = s.engine.ask(s.ledger())  # the decision path's ask (as `zeus-run run`'s loop asks)
    if request is None:  # the spec's `recurrences` are all done, or in flight
        total = spec.recurrences
        if s.asks:
            raise RunDirBusy(
                f"Run directory {str(s.rd.path)!r} is busy: every one of the job's {total} recurrences is done or "
                f"in flight ({len(s.asks)} ask(s)). Nothing was asked (exit code 75); ask again once those are told "
                "(a failed one is asked again), or raise `recurrences` in the spec."
            )
        raise JobComplete(
            f"All {total} recurrences of job {spec.name!r} are done in {str(s.rd.path)!r}: nothing was asked "
            f"(exit code {JOB_COMPLETE_EXIT_CODE}). Raise `recurrences` in the spec, or set `recurrences: null` "
            "for a job with no end."
        )
    recurrence = request.recurrence
    if request.attempt > 1 and "retry" not in request.decision.detail:
        why = _retry_reason(s, recurrence)
        decision = dataclasses.replace(request.decision, detail=f"{request.decision.detail}; {why}".strip("; "))
        request = dataclasses.replace(request, decision=decision)
    tdir = s.rd.trial_path(request.recurrence, request.attempt)
    if os.path.isdir(tdir):  # an earlier ask of the same try left its files (it expired)
        for name in TrialFiles.AGENT_FILES:
            _remove(tdir / name)
    now = time.time()
    lease = spec.lease
    heartbeat = tdir / TrialFiles.HEARTBEAT
    placeholder = EstimatedEnergy(spec.energy.watts)  # the trial is measured where it runs
    prepared = prepare(spec, s.rd, request, placeholder, profiling=False, make_dir=write_plan)
    token = prepared.running.token or ""
    extra = {
        Env.RUN_DIR: str(s.rd.path.absolute()),
        Env.ASK_TOKEN: token,
        Env.HEARTBEAT: str(heartbeat),
        Env.LEASE: repr(lease),
    }
    if write_plan:  # a script started from here (a shell's ask/tell) measures its start-up from this reading
        reading = ask_reading(dataclasses.asdict(spec.energy))
        if reading is not None:  # with its ask's token: a later ask's process never takes it for its own start
            extra[Env.ASK_ENERGY] = json.dumps({**reading, "token": token}, separators=(",", ":"))
    plan = dataclasses.replace(
        prepared.plan, trial=dataclasses.replace(prepared.plan.trial, env={**prepared.plan.trial.env, **extra})
    )
    if write_plan:
        plan.write()
    marker = dataclasses.replace(
        prepared.running,
        executor=ASK_EXECUTOR,
        pid=os.getpid(),
        lease=lease,
        asked_at=now,
        host=host,
        seen=request.seen,
        in_flight=request.in_flight,
        draw=request.draw,
        probe=request.probe,
        detail=request.decision.detail,
        request_key=stamped,
    )
    s.add(marker)
    return _answer(spec, s.rd.path, marker, plan.trial.argv, plan.trial.env, now + lease, plan.trial.workdir)


def _retry_reason(s: Session, recurrence: int) -> str:
    """Why the recurrence is asked again: how its last try ended."""
    last = next((r for r in reversed(s.history) if r.recurrence == recurrence), None)
    if last is None:
        return f"recurrence {recurrence} asked again"
    return f"retry of recurrence {recurrence} after try {last.attempt} ended {last.stop_reason}"


def _remove(path: Path) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
