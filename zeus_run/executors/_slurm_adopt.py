"""Taking over a dead launcher's Slurm jobs: which to adopt (`_Adoption.recover`), claiming one when the
engine asks for its trial again, and cancelling every other job of the run."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import time
from pathlib import Path

from zeus_run.contract import RunningMarker
from zeus_run.engine.core import TrialRequest
from zeus_run.executors._slurm_job import FINAL_STATE_WAIT, SQUEUE_INTERVAL, STOP_MARGIN, _retrying
from zeus_run.rundir.store import RunDir
from zeus_run.slurm import (
    PENDING_STATES,
    JobInfo,
    SlurmSettings,
    cancel,
    find_jobs,
    query,
)
from zeus_run.trial.agent import (
    heartbeat_age,
    read_outcome,
)

logger = logging.getLogger(__name__)


class _Adoption:
    """The adoption half of `zeus_run.executors.SlurmExecutor` (a mixin)."""

    kind: str
    prefix: str
    rd: RunDir
    _adopt: dict[int, RunningMarker]

    @staticmethod
    def recover(infos: list[RunningMarker], may_adopt: bool = True) -> set[int]:
        """After a launcher died with trials in flight: adopt each job whose agent is alive, cancel every other job of the run.

        A trial's job is adopted when it is still pending, when it runs and its
        agent's heartbeat is fresh (or it started less than ``heartbeat_timeout`` ago),
        or when its agent has already written the outcome.

        Returns:
            The ``trial`` of each adopted trial (see `RealExecutor.recover`).

        Raises:
            SlurmError: Slurm cannot be asked about the jobs (the history is untouched).
        """
        infos = [i for i in infos if i.job_prefix and i.job_name and i.trial_dir]
        if not infos:
            return set()
        jobs: list[JobInfo] = []
        for prefix in sorted({str(i.job_prefix) for i in infos}):
            jobs += _find_run_jobs(prefix)
        kept_ids: set[str] = set()
        adopted: set[int] = set()
        for info in infos:
            tdir = Path(str(info.trial_dir))
            timeout = info.heartbeat_timeout or SlurmSettings.heartbeat_timeout
            known = info.slurm_job_id or ""
            mine = [j for j in jobs if j.name == info.job_name and (not known or j.job_id == known)]
            job = mine[-1] if mine else None
            keep = _alive(job, tdir, timeout) if job is not None else read_outcome(tdir) is not None
            if not may_adopt or not keep:
                continue
            adopted.add(info.trial)
            if job is not None:
                kept_ids.add(job.job_id)
            logger.info(
                "the previous launcher's trial (recurrence %s try %s, %s) goes on; this launcher takes it over",
                info.recurrence,
                info.attempt,
                f"job {job.job_id}" if job is not None else "its outcome is written",
            )
        drop = [j.job_id for j in jobs if not j.final and j.job_id not in kept_ids]
        if drop:
            logger.warning("cancelling Slurm job(s) %s left by the previous launcher", ", ".join(drop))
            _retrying("scancel", lambda: cancel(drop))
        return adopted

    def _claim(self, req: TrialRequest, running: RunningMarker) -> RunningMarker | None:
        """The dead launcher's trial, if ``req`` asks for exactly it (else its job is cancelled)."""
        old = self._adopt.pop(req.trial, None)
        if old is None:
            return None
        differ = old.differences(running)
        if not differ:
            if not old.slurm_job_id:
                name = str(old.job_name)
                found = [j for j in _retrying("squeue", lambda: find_jobs(names=[name]))]
                if found:
                    old = dataclasses.replace(old, slurm_job_id=found[-1].job_id)
            return old
        logger.warning(
            "the previous launcher's job %s is not the trial asked for now (%s); cancelling it",
            old.slurm_job_id or old.job_name,
            ", ".join(differ),
        )
        if old.slurm_job_id:
            self._cancel_and_wait(old.slurm_job_id)
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
                if adopt.slurm_job_id:
                    if j.job_id == adopt.slurm_job_id:
                        return True
                elif j.name == adopt.job_name:  # the launcher died between sbatch and noting the id
                    return True
            return False

        jobs = _retrying("squeue", lambda: find_jobs(prefix=self.prefix))
        drop = [j.job_id for j in jobs if not j.final and not adopted(j)]
        if drop:
            logger.warning("cancelling Slurm job(s) %s of this run that no launcher owns", ", ".join(drop))
            _retrying("scancel", lambda: cancel(drop))


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


def _adoptions(infos: list[RunningMarker] | None) -> dict[int, RunningMarker]:
    """The trials `SlurmExecutor.recover` chose to adopt (still marked in ``running.json``), by ``trial``."""
    return {i.trial: i for i in infos or [] if i.executor == "slurm" and i.job_name}


def _kept(running: RunningMarker, old: RunningMarker) -> RunningMarker:
    """``running`` with what a taken-over trial keeps from the dead launcher's marker."""
    kept = {k: getattr(old, k) for k in ("started_at", "token", "slurm_job_id") if getattr(old, k) is not None}
    return dataclasses.replace(running, **kept)
