"""A Slurm trial's record: from its agent's outcome (or its absence) and what Slurm said, and the
infrastructure-failure streak that stops a run instead of retrying for ever."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import socket
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from zeus_run import __version__
from zeus_run.contract import StopReason, TrialOutcome
from zeus_run.energy import EnergySource
from zeus_run.engine.record import Measurement
from zeus_run.executors._base import measured_by, to_record
from zeus_run.executors._slurm_job import _Job
from zeus_run.records import TrialRecord
from zeus_run.rundir.store import RunDir
from zeus_run.slurm import (
    UNKNOWN,
    SlurmAgentError,
    SlurmError,
    SlurmSettings,
    is_infrastructure_failure,
)
from zeus_run.spec import JobSpec
from zeus_run.trial.agent import (
    EPOCHS_NAME,
    read_agent_info,
)
from zeus_run.trial.burst import BurstWarning

logger = logging.getLogger(__name__)


class SlurmRecords:
    """A Slurm trial's history record, from its agent's files and the cluster's word (a collaborator of
    `zeus_run.executors.SlurmExecutor`), and the streak of trials the cluster ended.

    Args:
        spec: The job.
        settings: Its Slurm settings.
        energy: The launcher's energy source (what a record says when the agent said nothing).
        rd: The run directory as the nodes see it (an absolute path).
        burst: The run's warning about epochs read in one burst.
        history: The records so far (the streak of infrastructure failures continues from them).
    """

    def __init__(
        self,
        spec: JobSpec,
        settings: SlurmSettings,
        energy: EnergySource,
        rd: RunDir,
        burst: BurstWarning,
        history: Iterable[TrialRecord],
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.energy = energy
        self._rd = rd
        self.burst = burst
        self._infra: list[str] = _infra_streak(history)

    def check_infra_streak(self) -> None:
        """Raise once more trials in a row than ``infra_retries`` were ended by the cluster.

        Raises:
            SlurmError: The streak is too long.
        """
        if len(self._infra) <= self.settings.infra_retries:
            return
        states = ", ".join(self._infra[-(self.settings.infra_retries + 1) :])
        raise SlurmError(
            f"The last {len(self._infra)} trials were all ended by the cluster ({states}), so the run stops instead "
            f"of retrying for ever. {_infra_hint(self._infra[-1], self.settings)} Each of them is in the history "
            f"(zeus-run history); run the same command again to resume, or raise executor.infra_retries "
            f"(now {self.settings.infra_retries})."
        )

    # -- the record ----------------------------------------------------------------------
    def record(self, job: _Job, outcome: TrialOutcome | None) -> TrialRecord:
        """The trial's record from the agent's outcome (None: it left none) and what Slurm said."""
        state = job.state
        agent = read_agent_info(job.dir) or {}
        node = job.node or agent.get("host")
        notes: list[str] = []
        ours = job.stop_why == "launcher"
        if outcome is None:
            outcome, why = self._without_outcome(job, state)
            notes.append(why)
        elif ours and not outcome.stop_reason.judged:
            # Stopped on our request before it was judged (a plain scancel may kill the script first).
            outcome = dataclasses.replace(outcome, stop_reason=StopReason.INTERRUPTED, reached=False)
        elif (
            not ours
            and not outcome.stop_reason.judged
            and (outcome.stop_reason is StopReason.INTERRUPTED or is_infrastructure_failure(state))
        ):
            # Slurm (or a person) ended the job before the agent judged the trial: the
            # script was killed, or the agent stopped it on a signal that was not ours.
            outcome = dataclasses.replace(outcome, stop_reason=StopReason.INFRASTRUCTURE, reached=False)
        if outcome.stop_reason.infrastructure:
            notes.insert(0, self._infra_note(job, state, node))
            outcome = dataclasses.replace(outcome, cause=notes[0])
            self._infra.append("heartbeat lost" if job.stop_why == "heartbeat" else state)
        elif outcome.stop_reason is not StopReason.INTERRUPTED:
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
        record = to_record(
            self.spec,
            self._rd,
            job.req,
            job.prepared,
            outcome,
            measured_by(agent, Measurement.of(self.energy)),
            message,
            where,
        )
        self.burst.check(record)
        return record

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
            reason, why = StopReason.INTERRUPTED, ""
        elif job.stop_why == "heartbeat":
            reason, why = StopReason.INFRASTRUCTURE, "the agent's heartbeat stopped, so the job was cancelled"
        elif state == "OUT_OF_MEMORY":
            reason = StopReason.CRASHED
            why = "Slurm killed the job for using more memory than it was given (OUT_OF_MEMORY)"
        elif is_infrastructure_failure(state):
            reason, why = StopReason.INFRASTRUCTURE, "its agent left no outcome"
        elif job.beat is None and job.job_id is not None:
            raise SlurmAgentError(self._never_ran(job, state))
        else:
            reason = StopReason.INFRASTRUCTURE
            why = f"the agent ended without writing its outcome (Slurm state {state})"
        metrics = tuple(float(r.get("metric", math.nan)) for r in rows)
        max_power = float(
            ((read_agent_info(job.dir) or {}).get("energy") or {}).get("max_power") or self.energy.max_power
        )
        code = job.info.exit_code if job.info is not None else None
        cause = why if reason.failure else None
        outcome = TrialOutcome.of(
            reason,
            epochs=epochs,
            time=t,
            energy=e,
            max_power=max_power,
            cost=c,
            reached=False,
            exit_code=code,
            metrics=metrics,
            cause=cause,
        )
        return outcome, why

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


def _infra_streak(records: Iterable[TrialRecord]) -> list[str]:
    """Slurm states of the infrastructure failures at the end of the history (the current streak)."""
    streak: list[str] = []
    for r in records:
        if r.stop_reason.infrastructure:
            streak.append(str((r.provenance or {}).get("slurm_state", UNKNOWN)))
        elif r.stop_reason is not StopReason.INTERRUPTED:
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
