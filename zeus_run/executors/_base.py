"""What every real executor shares: the listener protocol, building a trial's plan, and turning its outcome into a record."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import math
import os
import socket
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from zeus_run import __version__
from zeus_run.contract import Env, RunningMarker, TrialFiles, TrialOutcome, TrialPlan
from zeus_run.cost import scale_learning_rate
from zeus_run.energy import EnergySource, open_energy_source
from zeus_run.engine.core import TrialRequest
from zeus_run.engine.record import Measurement, launched, trial_record
from zeus_run.power import PowerSession
from zeus_run.records import TrialRecord
from zeus_run.rundir.store import RunDir
from zeus_run.spec import JobSpec, substitute
from zeus_run.trial.agent import AgentPlan
from zeus_run.trial.burst import BurstWarning
from zeus_run.trial.proctree import new_token
from zeus_run.trial.run import NullListener, TrialListener

logger = logging.getLogger(__name__)


class RunListener(TrialListener, Protocol):
    """Live progress of a whole run (the CLI renders it; `NullRunListener` ignores it)."""

    def on_run_start(self, spec: JobSpec, run_dir: Path, energy: str, done: int) -> None: ...

    def on_more_recurrences(self, total: int) -> None:
        """The run now goes to ``total`` recurrences (a trigger joined it, `zeus_run.rundir.joins`)."""

    def on_trial_start(self, req: TrialRequest, learning_rate: float | None, trial_dir: Path) -> None: ...

    def on_trial_end(self, record: TrialRecord) -> None: ...


class NullRunListener(NullListener):
    """Ignores everything."""

    def on_run_start(self, spec: JobSpec, run_dir: Path, energy: str, done: int) -> None:
        pass

    def on_more_recurrences(self, total: int) -> None:
        pass

    def on_trial_start(self, req: TrialRequest, learning_rate: float | None, trial_dir: Path) -> None:
        pass

    def on_trial_end(self, record: TrialRecord) -> None:
        pass


class RealExecutor(ABC):
    """Runs the engine's trial requests for real (a `zeus_run.engine.core.Executor`).

    Args:
        spec: The job.
        rd: The opened, locked run directory.
        energy: The run's energy source (the local executor measures with it).
        listener: Receives live progress.
        cancel: Set when the launcher is asked to stop; the running trial is stopped promptly.
        power: The run's power-limit session, if any.
    """

    #: ``executor.kind`` in the spec.
    kind: str = ""

    def __init__(
        self,
        spec: JobSpec,
        rd: RunDir,
        energy: EnergySource,
        listener: RunListener,
        cancel: threading.Event,
        power: PowerSession | None = None,
    ) -> None:
        self.spec = spec
        self.rd = rd
        self.energy = energy
        self.listener = listener
        self.cancel = cancel
        self.power = power
        self.provenance = provenance(energy)
        #: Warns once per run when a trial's epochs arrived in one burst at its exit (buffered output).
        self.burst = BurstWarning()

    @abstractmethod
    def __call__(self, req: TrialRequest) -> TrialRecord:
        """Run one trial to its end and return its record (not yet persisted)."""

    @classmethod
    def open_energy(cls, spec: JobSpec) -> EnergySource:
        """The run's energy source on the launcher (the local executor measures with it)."""
        return open_energy_source(spec.energy)

    @staticmethod
    @abstractmethod
    def recover(infos: list[RunningMarker], may_adopt: bool = True) -> set[int]:
        """Clean up after a launcher that died with trials in flight (``infos``: its ``running.json`` entries).

        ``may_adopt`` False: stop every one of them (see `zeus_run.rundir.resume.recover`).

        Nothing the dead launcher started may stay running unowned.

        Returns:
            The ``trial`` of each trial that goes on without the dead launcher and that
            this executor adopts: it is not recorded as interrupted, it stays marked in
            flight, and the executor (constructed next) picks it up when the engine asks
            for exactly that trial again (otherwise it stops it).
        """

    def drain(self) -> list[tuple[TrialRequest, TrialRecord]]:
        """After the launcher was cancelled: wait for the trials this executor runs by itself (``start``) to stop.

        Returns their requests and records, in the order they ended (the caller
        persists them). Executors without ``start``/``wait_any`` have none.
        """
        return []

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release what the executor holds; nothing by default."""


def learning_rate_for(spec: JobSpec, batch_size: int) -> float | None:
    """The learning rate passed to the script for ``batch_size``."""
    if spec.learning_rate is None:
        return None
    return scale_learning_rate(spec.learning_rate, spec.default_batch_size, batch_size, spec.lr_scaling)


def placeholder_values(
    spec: JobSpec, batch_size: int, seed: int, recurrence: int, attempt: int, log_dir: Path
) -> dict[str, object]:
    """Values of the ``{placeholders}`` for one trial."""
    lr = learning_rate_for(spec, batch_size)
    return {
        "batch_size": batch_size,
        "learning_rate": "" if lr is None else repr(lr),
        "seed": seed,
        "epochs": spec.max_epochs,
        "target_metric": repr(spec.target_metric),
        "recurrence": recurrence,
        "try": attempt,
        "python": sys.executable,
        "log_dir": str(log_dir),
    }


def command(spec: JobSpec, values: dict[str, object]) -> tuple[tuple[str, ...], dict[str, str]]:
    """The trial's argv and the spec's environment additions, placeholders substituted."""
    argv = tuple(substitute(a, values, shell=spec.shell) for a in spec.command)
    env = {k: substitute(v, values) for k, v in spec.env.items()}
    return argv, env


def provenance(energy: EnergySource) -> dict[str, object]:
    """Where trials run: zeus-run version, host, measured GPUs, and the Slurm job (when there is one)."""
    out: dict[str, object] = {"zeus_run": __version__, "host": socket.gethostname()}
    gpus = energy.devices()
    if gpus:
        out["gpus"] = gpus
    if os.environ.get("SLURM_JOB_ID"):
        out["slurm_job_id"] = os.environ["SLURM_JOB_ID"]
    return out


@dataclasses.dataclass(frozen=True)
class PreparedTrial:
    """One trial, ready to launch.

    Attributes:
        plan: What the agent runs.
        running: What ``running.json`` records while it runs: everything the engine
            decided, so a launcher killed mid-trial leaves a record replay can audit.
        learning_rate: Learning rate passed to the script.
        seed: Seed passed to the script.
    """

    plan: AgentPlan
    running: RunningMarker
    learning_rate: float | None
    seed: int


def prepare(
    spec: JobSpec,
    rd: RunDir,
    req: TrialRequest,
    energy: EnergySource,
    profiling: bool,
    extra_env: Mapping[str, str] | None = None,
    make_dir: bool = True,
) -> PreparedTrial:
    """Build a trial's plan: command, environment (the ``ZEUS_*`` contract, then ``extra_env``), stop rules, files.

    ``make_dir=False`` names the trial's directory without creating it (a server's ask: the first report does).
    """
    bs = req.decision.batch_size
    lr = learning_rate_for(spec, bs)
    seed = spec.seed + req.observed
    tdir = rd.trial_dir(req.recurrence, req.attempt) if make_dir else rd.trial_path(req.recurrence, req.attempt)
    values = placeholder_values(spec, bs, seed, req.recurrence, req.attempt, tdir)
    argv, env = command(spec, values)
    env.update(
        {
            Env.BATCH_SIZE: str(bs),
            Env.LEARNING_RATE: "" if lr is None else repr(lr),
            Env.SEED: str(seed),
            Env.TARGET_METRIC: repr(spec.target_metric),
            Env.HIGHER_IS_BETTER: str(int(spec.higher_is_better)),
            Env.MAX_EPOCHS: str(spec.max_epochs),
            Env.ETA_KNOB: repr(spec.eta),
            Env.COST_THRESH: repr(req.cost_threshold),
            Env.CURVE_STOP: str(int(req.curve_stop)),
            Env.LOG_DIR: str(tdir),
            Env.JOB_ID: f"{spec.name}-r{req.recurrence}-t{req.attempt}",
            Env.RECURRENCE: str(req.recurrence),
            Env.TRY: str(req.attempt),
            Env.EVENT_LOG: str(tdir / TrialFiles.EVENTS),
            Env.STOP_FILE: str(tdir / TrialFiles.STOP),
            Env.ENERGY: json.dumps(dataclasses.asdict(spec.energy)),
            Env.TIMEOUT: "" if spec.timeout is None else repr(spec.timeout),
        }
    )
    if spec.metric.name is not None:
        env[Env.METRIC_NAME] = spec.metric.name
    env.update(extra_env or {})
    if profiling:
        env.update({Env.PROFILE: "1", Env.PROFILE_STOP: str(tdir / TrialFiles.PROFILE_DONE)})
    token = new_token()
    trial = TrialPlan(
        argv=argv,
        shell=spec.shell,
        stdout=spec.stdout,
        workdir=spec.workdir,
        env=env,
        log_path=tdir / TrialFiles.OUTPUT,
        event_path=tdir / TrialFiles.EVENTS,
        stop_path=tdir / TrialFiles.STOP,
        max_epochs=spec.max_epochs,
        target_metric=spec.target_metric,
        higher_is_better=spec.higher_is_better,
        metric_regex=spec.metric.regex if spec.metric.source in ("regex", "file") else None,
        metric_key=spec.metric.key if spec.metric.source == "jsonl" else None,
        metric_path=spec.workdir / substitute(spec.metric.path, values) if spec.metric.path is not None else None,
        eta=spec.eta,
        cost_threshold=req.cost_threshold,
        curve_stop=req.curve_stop,
        timeout=spec.timeout,
        stop_grace=spec.stop.grace,
        term_grace=spec.stop.term_grace,
        kill_grace=spec.stop.kill_grace,
        on_target=spec.stop.on_target,
        token=token,
        profile_stop_path=tdir / TrialFiles.PROFILE_DONE if profiling else None,
    )
    energy_settings = {k: v for k, v in dataclasses.asdict(spec.energy).items()}
    running = dataclasses.replace(marker(spec, req, energy), token=token, trial_dir=str(tdir))
    return PreparedTrial(AgentPlan(trial, tdir, energy_settings), running, lr, seed)


def marker(spec: JobSpec, req: TrialRequest, energy: EnergySource) -> RunningMarker:
    """What ``running.json`` records of a trial: everything the engine decided (so a launcher
    killed mid-trial leaves a record replay can audit), and how it is measured."""
    bs = req.decision.batch_size
    concurrent = spec.concurrency > 1  # then it carries what the interrupted record is stamped with
    return RunningMarker(
        recurrence=req.recurrence,
        attempt=req.attempt,
        trial=req.trial,
        batch_size=bs,
        stage=req.decision.stage,
        detail=req.decision.detail,
        cost_threshold=None if math.isinf(req.cost_threshold) else req.cost_threshold,
        learning_rate=learning_rate_for(spec, bs),
        seed=spec.seed + req.observed,
        started_at=now(),
        pid=os.getpid(),
        energy_source=energy.name,
        estimated=energy.estimated,
        max_power=energy.max_power,
        seen=req.seen if concurrent else None,
        in_flight=req.in_flight if concurrent else (),
        draw=req.draw if concurrent else 0,
        probe=req.probe if concurrent else False,
        horizon=req.horizon,
        curve_stop=req.curve_stop,
        lifetime=req.lifetime,
    )


def to_record(
    spec: JobSpec,
    rd: RunDir,
    req: TrialRequest,
    prepared: PreparedTrial,
    out: TrialOutcome,
    how: Measurement,
    message: str | None,
    where: dict[str, object] | None,
) -> TrialRecord:
    """The history record of a finished trial (`zeus_run.engine.record.trial_record` with what the executor knows)."""
    return trial_record(
        spec.name,
        req,
        out,
        how,
        learning_rate=prepared.learning_rate,
        seed=prepared.seed,
        cost_threshold=prepared.running.cost_threshold,
        provenance=where,
        started_at=prepared.running.started_at,
        ended_at=now(),
        log=str(prepared.plan.trial.log_path.relative_to(rd.path)),
        message=message,
    )


def measured_by(agent: Mapping[str, object], fallback: Measurement) -> Measurement:
    """How an agent measured its trial (``agent.json``'s ``energy``), else ``fallback``."""
    m = agent.get("energy")
    m = m if isinstance(m, Mapping) else {}
    method = m.get("method")
    return Measurement(
        str(m.get("name") or fallback.source),
        bool(m.get("estimated", fallback.estimated)),
        str(method) if method else fallback.method,
        launched("agent"),
    )


def now() -> str:
    """The current time, ISO-8601 in UTC (milliseconds)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
