"""Slurm job states, and which of them end a job and which are not the trial's fault.

The names are Slurm's (squeue(1), "JOB STATE CODES"). A job in a final state
stays visible to ``squeue -t all`` and ``scontrol`` only for ``MinJobAge``
seconds (300 by default; 30 on the dev cluster) and there is no ``sacct``
without accounting, so a caller that polls less often may never see the final
state: `UNKNOWN` stands for that.
"""

from __future__ import annotations

#: The job is gone from slurmctld's memory (purged after MinJobAge, or never existed).
UNKNOWN = "UNKNOWN"

#: States after which the job's processes have ended (or will not start).
FINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)

#: Final states in which Slurm, not the training, ended the trial: the cluster's
#: limits or faults, or a person's ``scancel``. Such a trial says nothing about
#: the cost of its batch size; it is recorded with its state and retried.
#: FAILED (non-zero exit) and OUT_OF_MEMORY (the batch size did not fit) are the
#: trial's own outcome and are not in this set.
INFRASTRUCTURE_STATES = frozenset({"BOOT_FAIL", "CANCELLED", "DEADLINE", "NODE_FAIL", "PREEMPTED", "TIMEOUT"})

#: States of a job that has not started running yet.
PENDING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})


def is_final(state: str) -> bool:
    """Whether ``state`` ends the job (`FINAL_STATES`). ``COMPLETING`` is not final yet."""
    return state in FINAL_STATES


def is_infrastructure_failure(state: str) -> bool:
    """Whether a job that ended in ``state`` was ended by Slurm rather than by itself."""
    return state in INFRASTRUCTURE_STATES
