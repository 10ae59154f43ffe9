"""The slurm executor: each trial is a Slurm batch job that runs the trial agent on a node.

One trial, from the launcher's side:

1. The agent's plan goes into the trial's directory in the run directory (which
   the nodes must share, at the same path), and ``running.json`` names the job
   *before* it is submitted, so a launcher killed right after ``sbatch`` leaves
   behind what finds the job again.
2. ``sbatch --parsable`` submits a script that ``exec``s
   ``python -m zeus_run.trial.agent PLAN.json`` with the launcher's own interpreter.
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
import json
import logging
import math
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import zeus_run
from zeus_run.contract import TrialFiles
from zeus_run.energy import EnergySource
from zeus_run.engine.core import TrialRequest
from zeus_run.executors._base import RealExecutor, prepare
from zeus_run.executors._slurm_adopt import _Adoption, _adoptions, _kept
from zeus_run.executors._slurm_job import (
    FINAL_STATE_WAIT,
    OUTCOME_WAIT,
    OUTPUT_PER_POLL,
    POLL_INTERVAL,
    SQUEUE_INTERVAL,
    STOP_MARGIN,
    SUBMIT_VISIBLE_WAIT,
    NodeEnergy,
    _Job,
    _remove,
    _retrying,
    slurm_settings,
)
from zeus_run.executors._slurm_records import _infra_streak, _Records
from zeus_run.power import node_power_plan
from zeus_run.records import TrialRecord
from zeus_run.rundir.store import RunDir, check_writable
from zeus_run.slurm import (
    PENDING_STATES,
    BatchJob,
    SlurmAgentError,
    SlurmError,
    cancel,
    exec_script,
    job_name,
    query,
    run_job_prefix,
    submit,
)
from zeus_run.spec import JobSpec
from zeus_run.trial.agent import (
    EPOCHS_NAME,
    HEARTBEAT_NAME,
    read_outcome,
)

logger = logging.getLogger(__name__)


class SlurmExecutor(_Adoption, _Records, RealExecutor):
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
        running = dataclasses.replace(
            prepared.running,
            executor=self.kind,
            job_name=name,
            job_prefix=self.prefix,
            trial_dir=str(tdir),
            heartbeat_timeout=self.settings.heartbeat_timeout,
        )
        adopted = self._claim(req, running)
        if adopted is not None:
            prepared = dataclasses.replace(prepared, running=_kept(running, adopted))
            job = _Job(req, prepared, name, tdir, job_id=adopted.slurm_job_id, adopted=True)
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
            for stale in TrialFiles.AGENT_FILES:
                _remove(tdir / stale)  # an earlier job of this trial's directory (a job not taken over)
            plan_path = prepared.plan.write()
            job.job_id = self._submit(job, plan_path)
            self.rd.mark_running(dataclasses.replace(running, slurm_job_id=job.job_id))
        self.listener.on_trial_start(req, prepared.learning_rate, tdir)
        self._jobs[req.trial] = job

    def wait_any(self) -> TrialRecord:
        """Block until a started trial ends; its record (``trial`` as in its request).

        Raises:
            SlurmAgentError: An agent never showed up in the run directory (not shared?).
            SlurmError: Slurm stopped answering for `SLURM_RETRY_WINDOW` seconds.
        """
        record = self.wait_for(None)
        assert record is not None
        return record

    def wait_for(self, timeout: float | None) -> TrialRecord | None:
        """`wait_any`, giving up after ``timeout`` seconds (None: never) with None."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._done:
            if not self._jobs:
                raise RuntimeError("wait_any called with no trial in flight")
            self.poll()
            if not self._done:
                if deadline is not None and time.monotonic() >= deadline:
                    return None
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
            if old.slurm_job_id:
                ids.append(old.slurm_job_id)
            self.rd.clear_running(old.trial)
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

    # -- submitting ----------------------------------------------------------------------
    def _submit(self, job: _Job, plan_path: Path) -> str:
        argv = [sys.executable, "-m", "zeus_run.trial.agent", str(plan_path)]
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


def _agent_env() -> dict[str, str]:
    """The job's environment additions: zeus-run's own location first on PYTHONPATH (sbatch exports the rest)."""
    here = str(Path(zeus_run.__file__).resolve().parent.parent)
    old = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": here + (os.pathsep + old if old else "")}
