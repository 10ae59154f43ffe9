"""The slurm executor: each trial is a Slurm batch job that runs the trial agent on a node.

One trial, from the launcher's side:

1. The agent's plan goes into the trial's directory in the run directory (which
   the nodes must share, at the same path), and ``running.json`` names the job
   *before* it is submitted, so a launcher killed right after ``sbatch`` leaves
   behind what finds the job again.
2. ``sbatch --parsable`` submits a script that ``exec``s
   ``python -m zeus_run.agent PLAN.json`` with the launcher's own interpreter.
   The job is named after the run and the trial (`zeus_run.slurm.job_name`); its
   stdout and stderr are appended to the trial's ``output.log``, where the agent
   also logs the training script's output.
3. The launcher polls the agent's files (heartbeat, ``epochs.jsonl``,
   ``outcome.json``) every `POLL_INTERVAL` seconds and ``squeue`` every
   `SQUEUE_INTERVAL` seconds (never ``sacct``).
4. The agent's ``outcome.json`` is the trial's result; the job's final Slurm
   state, node and job id go into the record's ``provenance``.

Target and early stops are enforced by the agent on the node. To stop a trial
(SIGINT/SIGTERM to the launcher) the launcher signals the agent alone
(``scancel --signal=TERM --batch``), which runs the stop protocol and writes
its outcome; a plain ``scancel`` follows if the job has not ended after the
agent's own grace periods (``stop.term_grace + stop.kill_grace``) and
`STOP_MARGIN`.

A trial that Slurm ends (`zeus_run.slurm.INFRASTRUCTURE_STATES`: TIMEOUT,
NODE_FAIL, PREEMPTED, a person's ``scancel``...) or whose agent's heartbeat
stops is recorded with ``stop_reason: infrastructure``: not observed by the
optimizer, not counted against ``max_tries``, and retried by the engine. After
``executor.infra_retries`` such failures in a row the run stops with an error
naming them instead of retrying for ever.

A relaunched launcher (`SlurmExecutor.recover`) finds the jobs of the run by
name prefix. The job of the trial the dead launcher was running is adopted when
its agent is alive (pending, or running with a fresh heartbeat) or has already
written its outcome; every other job of the run is cancelled.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import math
import os
import socket
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import zeus_run
from zeus_run import __version__
from zeus_run.agent import (
    AGENT_NAME,
    EPOCHS_NAME,
    HEARTBEAT_NAME,
    OUTCOME_NAME,
    heartbeat_age,
    read_agent_info,
    read_outcome,
)
from zeus_run.energy import EnergySource
from zeus_run.engine import TrialRequest
from zeus_run.executors._base import PreparedTrial, RealExecutor, prepare, to_record
from zeus_run.power import node_power_plan
from zeus_run.records import TrialRecord
from zeus_run.rundir import RunDir, check_writable
from zeus_run.slurm import (
    PENDING_STATES,
    UNKNOWN,
    BatchJob,
    JobInfo,
    SlurmAgentError,
    SlurmError,
    SlurmSettings,
    cancel,
    exec_script,
    find_jobs,
    is_infrastructure_failure,
    job_name,
    query,
    run_job_prefix,
    submit,
)
from zeus_run.spec import EnergySettings, ExecutorSettings, JobSpec
from zeus_run.trial import TrialOutcome

logger = logging.getLogger(__name__)

#: Seconds between two looks at the agents' files (cheap: a few stats and reads).
POLL_INTERVAL = 0.2
#: Seconds between two ``squeue`` calls.
SQUEUE_INTERVAL = 1.0
#: Seconds to wait, after the outcome appeared, for Slurm to report the job final.
FINAL_STATE_WAIT = 15.0
#: Seconds to wait, after the job ended, for its outcome to show (shared filesystems cache).
OUTCOME_WAIT = 5.0
#: Seconds beyond the agent's own stop protocol before a plain ``scancel``.
STOP_MARGIN = 10.0
#: Seconds a just-submitted job may be missing from ``squeue`` before it counts as gone.
SUBMIT_VISIBLE_WAIT = 30.0
#: Seconds transient Slurm failures (controller busy or restarting) are retried before giving up.
SLURM_RETRY_WINDOW = 300.0
#: Most output bytes passed on to the listener per poll and trial.
OUTPUT_PER_POLL = 1 << 18

#: Stop reasons of a trial the agent judged (its result stands even if Slurm then ended the job).
JUDGED = ("target_reached", "max_epochs", "cost_threshold", "skipped")

_T = TypeVar("_T")


def slurm_settings(executor: ExecutorSettings) -> SlurmSettings:
    """The `zeus_run.slurm.SlurmSettings` of a spec's ``executor`` section."""
    fields = {f.name for f in dataclasses.fields(SlurmSettings)}
    return SlurmSettings(**{k: v for k, v in dataclasses.asdict(executor).items() if k in fields})


class NodeEnergy(EnergySource):
    """The launcher's stand-in for the energy that each trial's agent measures on its node.

    The launcher measures nothing itself: each record takes its energy source
    from the agent (``agent.json``). ``max_power`` is the spec's ``energy.watts``
    until an agent reports its own.
    """

    def __init__(self, settings: EnergySettings) -> None:
        self.settings = settings
        self.name = settings.source
        self.estimated = settings.source == "estimate"

    @property
    def max_power(self) -> float:
        return self.settings.watts

    def read(self) -> float:
        return 0.0

    def describe(self) -> str:
        return f"measured on each trial's node by its agent (energy.source: {self.settings.source})"


@dataclasses.dataclass
class _Job:
    """One trial in flight as a Slurm job (the launcher's view of it)."""

    req: TrialRequest
    prepared: PreparedTrial
    name: str
    dir: Path
    job_id: str | None = None
    adopted: bool = False
    submitted: float = dataclasses.field(default_factory=time.monotonic)
    info: JobInfo | None = None
    gone: bool = False  # squeue no longer knows it
    started: float | None = None  # when first seen running (monotonic)
    ended: float | None = None  # when first seen final or gone (monotonic)
    outcome_seen: float | None = None
    beat: tuple[float, float] | None = None  # (heartbeat mtime, monotonic time it last changed)
    stop_why: str | None = None  # "launcher" (a cancel) or "heartbeat" (the agent went quiet)
    stop_sent: float | None = None
    killed: bool = False  # a plain scancel was sent
    epochs_pos: int = 0
    log_pos: int = 0
    log_rest: bytes = b""

    @property
    def label(self) -> str:
        return f"job {self.job_id or '?'} ({self.name})"

    @property
    def state(self) -> str:
        return self.info.state if self.info is not None else UNKNOWN

    @property
    def node(self) -> str | None:
        return self.info.batch_host or self.info.nodes if self.info is not None else None


class SlurmExecutor(RealExecutor):
    """Runs each trial as a Slurm batch job (see the module docstring).

    It is a serial executor (``executor(request) -> record``) built from a
    non-blocking interface that runs several trials at once: `start` submits a
    trial's job and returns, `poll` looks at every job in flight once and returns
    the records of those that ended, and `wait_any` blocks until one ended.
    """

    kind = "slurm"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings = slurm_settings(self.spec.executor)
        # Paths in a plan are read on the node, whose working directory is not ours.
        self._rd = self.rd if self.rd.path.is_absolute() else RunDir(self.rd.path.resolve(), -1)
        self.prefix = run_job_prefix(self.spec.name, self._rd.path)
        self._jobs: dict[int, _Job] = {}
        self._done: deque[TrialRecord] = deque()
        #: Requests started and not yet returned by `wait_any`, by ``trial``.
        self._started: dict[int, TrialRequest] = {}
        self._last_squeue = -math.inf
        self._infra: list[str] = _infra_streak(self.rd.history.read())
        self._adopt = _adoptions(self.rd.running_trials())
        self._sweep()

    # -- the executor protocols ----------------------------------------------------------
    def __call__(self, req: TrialRequest) -> TrialRecord:
        self.start(req)
        return self.wait_any()

    def start(self, req: TrialRequest) -> None:
        """Submit the trial's job (or take over the dead launcher's job of the same trial); return at once.

        Raises:
            SlurmError: Too many infrastructure failures in a row, or Slurm refused the job.
        """
        self._check_infra_streak()
        self._started[req.trial] = req
        prepared = prepare(self.spec, self._rd, req, self.energy, profiling=False)
        power = node_power_plan(self.spec, self._rd.path, req.decision.batch_size)  # the agent sets its node's limits
        prepared = dataclasses.replace(prepared, plan=dataclasses.replace(prepared.plan, power=power))
        tdir = prepared.plan.dir
        name = job_name(self.spec.name, self._rd.path, tdir.name)
        running = {
            **prepared.running,
            "executor": self.kind,
            "job_name": name,
            "job_prefix": self.prefix,
            "trial_dir": str(tdir),
            "heartbeat_timeout": self.settings.heartbeat_timeout,
        }
        adopted = self._claim(req, running)
        if adopted is not None:
            prepared = dataclasses.replace(prepared, running={**running, **_kept(adopted)})
            job = _Job(req, prepared, name, tdir, job_id=adopted.get("slurm_job_id"), adopted=True)
            logger.info("took over %s of recurrence %d try %d", job.label, req.recurrence, req.attempt)
            self.rd.mark_running(prepared.running)
        else:
            prepared = dataclasses.replace(prepared, running=running)
            job = _Job(req, prepared, name, tdir)
            self.rd.mark_running(running)  # before sbatch: a launcher killed after it can find the job by name
            if self.cancel.is_set():  # stopping already: nothing is submitted
                job.stop_why = "launcher"
                self._done.append(self._record(job, None))
                return
            check_writable(self._rd.path)
            for stale in (OUTCOME_NAME, HEARTBEAT_NAME, AGENT_NAME, EPOCHS_NAME):
                _remove(tdir / stale)  # an earlier job of this trial's directory (a job not taken over)
            plan_path = prepared.plan.write()
            job.job_id = self._submit(job, plan_path)
            self.rd.mark_running({**running, "slurm_job_id": job.job_id})
        self.listener.on_trial_start(req, prepared.learning_rate, tdir)
        self._jobs[req.trial] = job

    def wait_any(self) -> TrialRecord:
        """Block until a started trial ends; its record (``trial`` as in its request).

        Raises:
            SlurmAgentError: An agent never showed up in the run directory (not shared?).
            SlurmError: Slurm stopped answering for `SLURM_RETRY_WINDOW` seconds.
        """
        while not self._done:
            if not self._jobs:
                raise RuntimeError("wait_any called with no trial in flight")
            self.poll()
            if not self._done:
                time.sleep(POLL_INTERVAL)
        record = self._done.popleft()
        self._started.pop(record.trial, None)
        return record

    def drain(self) -> list[tuple[TrialRequest, TrialRecord]]:
        """Stop every trial in flight (the launcher's cancel is set) and wait for their records.

        A trial whose end cannot be learned (Slurm stopped answering) stays marked
        in ``running.json``; the next launcher records it.
        """
        out: list[tuple[TrialRequest, TrialRecord]] = []
        try:
            while self._jobs or self._done:
                if self._done:
                    record = self._done.popleft()
                    req = self._started.pop(record.trial, None)
                    if req is not None:
                        out.append((req, record))
                    continue
                self.poll()
                if not self._done:
                    time.sleep(POLL_INTERVAL)
        except Exception as exc:  # the caller is already handling an error
            logger.error("could not learn how the trials in flight ended (%s); the next launcher records them", exc)
        return out

    def poll(self) -> list[TrialRecord]:
        """Look at every trial in flight once; the records of those that ended (also kept for `wait_any`)."""
        now = time.monotonic()
        if self.cancel.is_set():
            for job in self._jobs.values():
                if job.stop_why is None:
                    self._stop(job, "launcher")
        if now - self._last_squeue >= SQUEUE_INTERVAL:
            self._update(now)
        ended = []
        for trial, job in list(self._jobs.items()):
            self._follow(job)
            record = self._check(job, time.monotonic())
            if record is not None:
                del self._jobs[trial]
                ended.append(record)
        self._done.extend(ended)
        return ended

    def stop(self, trial: int) -> None:
        """Stop one trial in flight as a launcher's cancel does (it ends ``interrupted``)."""
        job = self._jobs.get(trial)
        if job is not None and job.stop_why is None:
            self._stop(job, "launcher")

    @property
    def in_flight(self) -> dict[int, str | None]:
        """``trial -> Slurm job id`` of the trials started and not yet returned."""
        return {trial: job.job_id for trial, job in self._jobs.items()}

    def close(self) -> None:
        """Cancel what is still in flight (the launcher is leaving on an error) and a job never taken over."""
        ids = [job.job_id for job in self._jobs.values() if job.job_id and job.ended is None]
        for old in self._adopt.values():  # taken over but never asked for again
            if old.get("slurm_job_id"):
                ids.append(str(old["slurm_job_id"]))
            self.rd.clear_running(int(old["trial"]))
        self._adopt.clear()
        if ids:
            logger.warning("cancelling Slurm job(s) %s: the launcher is stopping", ", ".join(ids))
            try:
                cancel(ids)
            except SlurmError as exc:
                logger.error("could not cancel job(s) %s (%s); cancel them with: scancel %s", ids, exc, " ".join(ids))
        self._jobs.clear()

    @classmethod
    def open_energy(cls, spec: JobSpec) -> EnergySource:
        """Energy is measured on the nodes: the launcher opens nothing (no NVML on a login node)."""
        return NodeEnergy(spec.energy)

    @staticmethod
    def recover(infos: list[dict[str, Any]], may_adopt: bool = True) -> set[int]:
        """After a launcher died with trials in flight: adopt each job whose agent is alive, cancel every other job of the run.

        A trial's job is adopted when it is still pending, when it runs and its
        agent's heartbeat is fresh (or it started less than ``heartbeat_timeout`` ago),
        or when its agent has already written the outcome.

        Returns:
            The ``trial`` of each adopted trial (see `RealExecutor.recover`).

        Raises:
            SlurmError: Slurm cannot be asked about the jobs (the history is untouched).
        """
        infos = [i for i in infos if i.get("job_prefix") and i.get("job_name") and i.get("trial_dir")]
        if not infos:
            return set()
        jobs: list[JobInfo] = []
        for prefix in sorted({str(i["job_prefix"]) for i in infos}):
            jobs += _find_run_jobs(prefix)
        kept_ids: set[str] = set()
        adopted: set[int] = set()
        for info in infos:
            tdir = Path(str(info["trial_dir"]))
            timeout = float(info.get("heartbeat_timeout") or SlurmSettings.heartbeat_timeout)
            known = str(info.get("slurm_job_id") or "")
            mine = [j for j in jobs if j.name == info["job_name"] and (not known or j.job_id == known)]
            job = mine[-1] if mine else None
            keep = _alive(job, tdir, timeout) if job is not None else read_outcome(tdir) is not None
            if not may_adopt or not keep or not isinstance(info.get("trial"), int):
                continue
            adopted.add(int(info["trial"]))
            if job is not None:
                kept_ids.add(job.job_id)
            logger.info(
                "the previous launcher's trial (recurrence %s try %s, %s) goes on; this launcher takes it over",
                info.get("recurrence"),
                info.get("attempt"),
                f"job {job.job_id}" if job is not None else "its outcome is written",
            )
        drop = [j.job_id for j in jobs if not j.final and j.job_id not in kept_ids]
        if drop:
            logger.warning("cancelling Slurm job(s) %s left by the previous launcher", ", ".join(drop))
            _retrying("scancel", lambda: cancel(drop))
        return adopted

    # -- submitting ----------------------------------------------------------------------
    def _submit(self, job: _Job, plan_path: Path) -> str:
        argv = [sys.executable, "-m", "zeus_run.agent", str(plan_path)]
        comment = f"zeus-run trial {job.dir.name} of {self.spec.name} (run directory {self._rd.path})"
        batch = BatchJob(
            name=job.name,
            script=exec_script(argv, comment),
            output=job.dir / "output.log",
            chdir=job.dir,
            env=_agent_env(),
        )
        job_id = _retrying("sbatch", lambda: submit(batch, self.settings))
        logger.debug("submitted %s for recurrence %d try %d", job_id, job.req.recurrence, job.req.attempt)
        return job_id

    def _claim(self, req: TrialRequest, running: dict[str, Any]) -> dict[str, Any] | None:
        """The dead launcher's trial, if ``req`` asks for exactly it (else its job is cancelled)."""
        old = self._adopt.pop(req.trial, None)
        if old is None:
            return None
        keys: tuple[str, ...] = ("recurrence", "attempt", "trial", "batch_size", "seed", "cost_threshold")
        keys += ("learning_rate", "seen", "in_flight", "draw", "probe")
        if all(old.get(k) == running.get(k) for k in keys):
            if not old.get("slurm_job_id"):
                found = [j for j in _retrying("squeue", lambda: find_jobs(names=[old["job_name"]]))]
                if found:
                    old["slurm_job_id"] = found[-1].job_id
            return old
        differ = [f"{k} {old.get(k)!r} -> {running.get(k)!r}" for k in keys if old.get(k) != running.get(k)]
        logger.warning(
            "the previous launcher's job %s is not the trial asked for now (%s); cancelling it",
            old.get("slurm_job_id") or old.get("job_name"),
            ", ".join(differ),
        )
        if old.get("slurm_job_id"):
            self._cancel_and_wait(str(old["slurm_job_id"]))
        return None

    def _cancel_and_wait(self, job_id: str) -> None:
        """Cancel a job and wait (bounded) until it ended, so it no longer writes into its trial's directory."""
        cancel([job_id])
        deadline = time.monotonic() + FINAL_STATE_WAIT + STOP_MARGIN
        while time.monotonic() < deadline:
            info = _retrying("squeue", lambda: query([job_id])).get(job_id)
            if info is None or info.final:
                return
            time.sleep(SQUEUE_INTERVAL)
        logger.warning("job %s has not ended %g s after scancel", job_id, FINAL_STATE_WAIT + STOP_MARGIN)

    def _sweep(self) -> None:
        """Cancel every live job of this run but the one taken over (the run directory's lock: no other launcher owns one)."""

        def adopted(j: JobInfo) -> bool:
            for adopt in self._adopt.values():
                if adopt.get("slurm_job_id"):
                    if j.job_id == str(adopt["slurm_job_id"]):
                        return True
                elif j.name == adopt.get("job_name"):  # the launcher died between sbatch and noting the id
                    return True
            return False

        jobs = _retrying("squeue", lambda: find_jobs(prefix=self.prefix))
        drop = [j.job_id for j in jobs if not j.final and not adopted(j)]
        if drop:
            logger.warning("cancelling Slurm job(s) %s of this run that no launcher owns", ", ".join(drop))
            _retrying("scancel", lambda: cancel(drop))

    def _check_infra_streak(self) -> None:
        if len(self._infra) <= self.settings.infra_retries:
            return
        states = ", ".join(self._infra[-(self.settings.infra_retries + 1) :])
        raise SlurmError(
            f"The last {len(self._infra)} trials were all ended by the cluster ({states}), so the run stops instead "
            f"of retrying for ever. {_infra_hint(self._infra[-1], self.settings)} Each of them is in the history "
            f"(zeus-run history); run the same command again to resume, or raise executor.infra_retries "
            f"(now {self.settings.infra_retries})."
        )

    # -- watching ------------------------------------------------------------------------
    def _update(self, now: float) -> None:
        """One ``squeue`` for every job in flight."""
        ids = [job.job_id for job in self._jobs.values() if job.job_id]
        self._last_squeue = now
        if not ids:
            return
        infos = _retrying("squeue", lambda: query(ids))
        for job in self._jobs.values():
            if not job.job_id:
                continue
            info = infos.get(job.job_id)
            if info is None:
                if job.info is not None or now - job.submitted > SUBMIT_VISIBLE_WAIT:
                    job.gone = True
                    job.ended = job.ended or now
                continue
            job.info = info
            if job.started is None and info.state not in PENDING_STATES:
                job.started = now
            if info.final and job.ended is None:
                job.ended = now

    def _check(self, job: _Job, now: float) -> TrialRecord | None:
        """The trial's record once it is over, else None (and act on a quiet agent or an overdue stop)."""
        outcome = read_outcome(job.dir)
        if outcome is not None:
            if job.ended is not None or job.job_id is None:
                return self._record(job, outcome)
            if job.outcome_seen is None:
                job.outcome_seen = now
                self._last_squeue = -math.inf  # ask Slurm for the final state at the next poll
            elif now - job.outcome_seen > FINAL_STATE_WAIT:
                return self._record(job, outcome)
            return None
        if job.ended is not None:
            return self._record(job, None) if now - job.ended >= OUTCOME_WAIT else None
        self._watch_heartbeat(job, now)
        if job.stop_sent is not None and not job.killed:
            grace = self.spec.stop.term_grace + self.spec.stop.kill_grace + STOP_MARGIN
            if now - job.stop_sent > grace:
                logger.warning("%s did not end %g s after the agent was asked to stop; scancel", job.label, grace)
                self._cancel(job)
        return None

    def _watch_heartbeat(self, job: _Job, now: float) -> None:
        try:
            mtime = (job.dir / HEARTBEAT_NAME).stat().st_mtime
        except OSError:
            mtime = None
        if mtime is not None and (job.beat is None or job.beat[0] != mtime):
            job.beat = (mtime, now)  # a change, timed by our clock: the nodes' clocks do not matter
        if job.started is None or job.stop_why is not None:
            return
        limit = self.settings.heartbeat_timeout
        if job.beat is None and now - job.started > limit:
            self._jobs.pop(job.req.trial, None)
            self._cancel(job)
            raise SlurmAgentError(
                f"Slurm {job.label} has run on {job.node or 'its node'} for {now - job.started:.0f} s, but its "
                f"agent wrote no heartbeat into {str(job.dir)!r}. The run directory must be on a filesystem that "
                "the compute nodes share with this machine, at the same path (not /tmp): set run_dir (and workdir) "
                "to such a directory, and make sure the nodes have the Python environment that runs zeus-run at "
                f"the same path ({sys.executable}). The job's output, if the node could write it: "
                f"{str(job.dir / 'output.log')!r}. Raise executor.heartbeat_timeout (now {limit:g} s) if the "
                "nodes are merely slow to start Python."
            )
        if job.beat is not None and now - job.beat[1] > limit:
            logger.warning(
                "the agent of %s wrote no heartbeat for %g s (node down, or lost the shared filesystem); cancelling it",
                job.label,
                limit,
            )
            job.stop_why = "heartbeat"
            self._cancel(job)

    def _stop(self, job: _Job, why: str) -> None:
        """Stop a trial: SIGTERM to its agent (which stops the training itself), or scancel if no agent runs yet."""
        job.stop_why = why
        job.stop_sent = time.monotonic()
        if job.job_id is None:
            return
        # The agent handles SIGTERM from before its first heartbeat; before that, scancel.
        agent_up = job.beat is not None or (job.dir / HEARTBEAT_NAME).exists()
        if agent_up and job.ended is None:
            logger.info("stopping %s: SIGTERM to its agent", job.label)
            _retrying("scancel", lambda: cancel([str(job.job_id)], signal="TERM", batch_only=True))
        else:
            self._cancel(job)

    def _cancel(self, job: _Job) -> None:
        job.killed = True
        if job.job_id is not None:
            _retrying("scancel", lambda: cancel([str(job.job_id)]))

    def _follow(self, job: _Job) -> None:
        """Pass the trial's new epochs and output lines on to the listener."""
        try:
            with open(job.dir / EPOCHS_NAME, "rb") as f:
                f.seek(job.epochs_pos)
                data = f.read()
        except OSError:
            data = b""
        end = data.rfind(b"\n") + 1
        job.epochs_pos += end
        for line in data[:end].splitlines():
            try:
                row = json.loads(line)
                self.listener.on_epoch(int(row["epoch"]), row["metric"], row["time"], row["energy"], row["cost"])
            except (ValueError, KeyError, TypeError):
                continue
        try:
            with open(job.dir / "output.log", "rb") as f:
                f.seek(job.log_pos)
                data = f.read(OUTPUT_PER_POLL)
        except OSError:
            return
        job.log_pos += len(data)
        data = job.log_rest + data
        end = data.rfind(b"\n") + 1
        job.log_rest = data[end:][-4096:]
        for line in data[:end].splitlines():
            self.listener.on_output(line.decode("utf-8", "replace")[:4096])

    # -- the record ----------------------------------------------------------------------
    def _record(self, job: _Job, outcome: TrialOutcome | None) -> TrialRecord:
        """The trial's record from the agent's outcome (None: it left none) and what Slurm said."""
        state = job.state
        agent = read_agent_info(job.dir) or {}
        node = job.node or agent.get("host")
        notes: list[str] = []
        ours = job.stop_why == "launcher"
        if outcome is None:
            outcome, why = self._without_outcome(job, state)
            notes.append(why)
        elif ours and outcome.stop_reason not in JUDGED:
            # Stopped on our request before it was judged (a plain scancel may kill the script first).
            outcome = dataclasses.replace(outcome, stop_reason="interrupted", reached=False)
        elif (
            not ours
            and outcome.stop_reason not in JUDGED
            and (outcome.stop_reason == "interrupted" or is_infrastructure_failure(state))
        ):
            # Slurm (or a person) ended the job before the agent judged the trial: the
            # script was killed, or the agent stopped it on a signal that was not ours.
            outcome = dataclasses.replace(outcome, stop_reason="infrastructure", reached=False)
        if outcome.stop_reason == "infrastructure":
            notes.insert(0, self._infra_note(job, state, node))
            self._infra.append("heartbeat lost" if job.stop_why == "heartbeat" else state)
        elif outcome.stop_reason != "interrupted":
            self._infra.clear()
        if job.adopted:
            notes.append("taken over from a launcher that died while it ran")
        if outcome.message:
            notes.append(outcome.message)
        where: dict[str, object] = {"zeus_run": __version__, "host": node or UNKNOWN}
        devices = (agent.get("energy") or {}).get("devices")
        if devices:
            where["gpus"] = devices
        where.update(
            {
                "slurm_job_id": job.job_id or agent.get("slurm_job_id") or UNKNOWN,
                "slurm_node": node or UNKNOWN,
                "slurm_state": state,
                "launcher": socket.gethostname(),
            }
        )
        message = "; ".join(n for n in notes if n) or None
        record = to_record(self.spec, self._rd, job.req, job.prepared, outcome, self.energy, message, where)
        measured = agent.get("energy") or {}
        return dataclasses.replace(
            record,
            energy_source=str(measured.get("name") or record.energy_source),
            estimated=bool(measured.get("estimated", record.estimated)),
            energy_method=measured.get("method") or record.energy_method,
        )

    def _without_outcome(self, job: _Job, state: str) -> tuple[TrialOutcome, str]:
        """An outcome for a trial whose agent left none: its last counted epoch, and why there is none.

        Raises:
            SlurmAgentError: The job ended and its agent never wrote anything (it could not start).
        """
        rows = _epochs(job.dir)
        last = rows[-1] if rows else {}
        epochs, t, e, c = (
            len(rows),
            float(last.get("time", 0.0)),
            float(last.get("energy", 0.0)),
            float(last.get("cost", 0.0)),
        )
        if job.stop_why == "launcher":
            reason, why = "interrupted", ""
        elif job.stop_why == "heartbeat":
            reason, why = "infrastructure", "the agent's heartbeat stopped, so the job was cancelled"
        elif state == "OUT_OF_MEMORY":
            reason, why = "crashed", "Slurm killed the job for using more memory than it was given (OUT_OF_MEMORY)"
        elif is_infrastructure_failure(state):
            reason, why = "infrastructure", "its agent left no outcome"
        elif job.beat is None and job.job_id is not None:
            raise SlurmAgentError(self._never_ran(job, state))
        else:
            reason, why = "infrastructure", f"the agent ended without writing its outcome (Slurm state {state})"
        metrics = tuple(float(r.get("metric", math.nan)) for r in rows)
        max_power = float(
            ((read_agent_info(job.dir) or {}).get("energy") or {}).get("max_power") or self.energy.max_power
        )
        code = job.info.exit_code if job.info is not None else None
        return TrialOutcome(epochs, t, e, max_power, c, False, reason, code, metrics=metrics), why

    def _never_ran(self, job: _Job, state: str) -> str:
        log = job.dir / "output.log"
        try:
            tail = log.read_text(encoding="utf-8", errors="replace")[-1500:].strip()
            shown = f"Its output ({str(log)!r}) ends with:\n{tail}" if tail else f"Its output {str(log)!r} is empty."
        except OSError:
            shown = (
                f"Its output {str(log)!r} is not visible here: the run directory is probably not shared with the node."
            )
        return (
            f"Slurm {job.label} ended ({state}) on {job.node or 'its node'} without its agent ever writing into "
            f"{str(job.dir)!r}: the agent could not run there. The run directory must be on a filesystem the "
            "compute nodes share with this machine at the same path, and the nodes need the Python environment "
            f"that runs zeus-run at the same path ({sys.executable}). {shown}"
        )

    def _infra_note(self, job: _Job, state: str, node: str | None) -> str:
        reason = job.info.reason if job.info is not None and job.info.reason not in ("", "None") else ""
        what = "its agent went quiet" if job.stop_why == "heartbeat" else f"Slurm ended it: {state}"
        return (
            f"{what}{f' ({reason})' if reason else ''} on {node or 'an unknown node'}; an infrastructure failure, "
            f"not fed to the optimizer and retried ({_infra_hint(state, self.settings)})"
        )


# -- helpers -----------------------------------------------------------------------------------


def _alive(job: JobInfo, trial_dir: Path, heartbeat_timeout: float) -> bool:
    """Whether a dead launcher's job is worth adopting: its agent lives (or may still start), or it is done."""
    if read_outcome(trial_dir) is not None:
        return True
    if job.final:
        return False
    if job.state in PENDING_STATES:
        return True
    age = heartbeat_age(trial_dir)
    if age is not None:
        return age < heartbeat_timeout
    started = _seconds_since(job.start_time)
    return started is not None and started < heartbeat_timeout


def _seconds_since(slurm_time: str | None) -> float | None:
    """Seconds since a time squeue printed (ISO 8601 in the cluster's local time), or None."""
    if not slurm_time:
        return None
    try:
        then = _dt.datetime.fromisoformat(slurm_time)
    except ValueError:
        return None
    return (_dt.datetime.now() - then).total_seconds()


def _find_run_jobs(prefix: str) -> list[JobInfo]:
    return _retrying("squeue", lambda: find_jobs(prefix=prefix))


def _adoptions(infos: list[dict[str, Any]] | None) -> dict[int, dict[str, Any]]:
    """The trials `SlurmExecutor.recover` chose to adopt (still marked in ``running.json``), by ``trial``."""
    return {
        int(i["trial"]): dict(i)
        for i in infos or []
        if i.get("executor") == SlurmExecutor.kind and i.get("job_name") and isinstance(i.get("trial"), int)
    }


def _kept(old: dict[str, Any]) -> dict[str, Any]:
    """What a taken-over trial keeps from the dead launcher's ``running.json``."""
    return {k: old[k] for k in ("started_at", "token", "slurm_job_id") if old.get(k) is not None}


def _infra_streak(records: Iterable[TrialRecord]) -> list[str]:
    """Slurm states of the infrastructure failures at the end of the history (the current streak)."""
    streak: list[str] = []
    for r in records:
        if r.stop_reason == "infrastructure":
            streak.append(str((r.provenance or {}).get("slurm_state", UNKNOWN)))
        elif r.stop_reason != "interrupted":
            streak.clear()
    return streak


def _infra_hint(state: str, settings: SlurmSettings) -> str:
    if state == "TIMEOUT":
        return f"the trial needs more than executor.time ({settings.time or 'the partition default'}); raise it"
    if state in ("NODE_FAIL", "BOOT_FAIL"):
        return "a node failed; if it keeps happening, ask your admins or exclude the node with extra_args: [--exclude=NODE]"
    if state == "PREEMPTED":
        return "a higher-priority job took the node; a partition or QOS without preemption avoids it"
    if state == "CANCELLED":
        return "someone cancelled the job (scancel), or an admin did"
    if state == "DEADLINE":
        return "the job passed its deadline"
    return "the agent stopped answering; check the node and the shared filesystem"


def _epochs(trial_dir: Path) -> list[dict[str, Any]]:
    try:
        lines = (trial_dir / EPOCHS_NAME).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _agent_env() -> dict[str, str]:
    """The job's environment additions: zeus-run's own location first on PYTHONPATH (sbatch exports the rest)."""
    here = str(Path(zeus_run.__file__).resolve().parent.parent)
    old = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": here + (os.pathsep + old if old else "")}


def _remove(path: Path) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _retrying(what: str, call: Callable[[], _T]) -> _T:
    """``call()``, tried again with growing pauses while it fails transiently (for at most `SLURM_RETRY_WINDOW` s)."""
    deadline = time.monotonic() + SLURM_RETRY_WINDOW
    pause = 1.0
    while True:
        try:
            return call()
        except SlurmError as exc:
            if not exc.transient or time.monotonic() + pause > deadline:
                raise
            logger.warning("%s failed (%s); trying again in %g s", what, exc, pause)
            time.sleep(pause)
            pause = min(pause * 2, 30.0)
