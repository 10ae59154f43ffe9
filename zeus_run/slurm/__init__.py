"""Slurm: the settings of the slurm executor and a small client over sbatch, squeue and scancel.

Without accounting there is no ``sacct``: job states come from ``squeue
--states=all``, which forgets a job MinJobAge seconds after it ends. Callers
treat the trial's own outcome file as the truth and Slurm's state as best effort
(`UNKNOWN` when a job vanished before it was seen in a final state).
"""

from zeus_run.slurm._client import (
    COMMAND_TIMEOUT,
    BatchJob,
    JobInfo,
    SlurmAgentError,
    SlurmError,
    SlurmNotFoundError,
    SlurmSubmitError,
    cancel,
    exec_script,
    find_jobs,
    job_name,
    parse_squeue,
    query,
    run_job_prefix,
    sbatch_command,
    slurm_version,
    submit,
)
from zeus_run.slurm._settings import RESERVED_SBATCH_OPTIONS, SlurmSettings, parse_time_limit, reserved_option
from zeus_run.slurm._states import (
    FINAL_STATES,
    INFRASTRUCTURE_STATES,
    PENDING_STATES,
    UNKNOWN,
    is_final,
    is_infrastructure_failure,
)

__all__ = [
    "COMMAND_TIMEOUT",
    "FINAL_STATES",
    "INFRASTRUCTURE_STATES",
    "PENDING_STATES",
    "RESERVED_SBATCH_OPTIONS",
    "UNKNOWN",
    "BatchJob",
    "JobInfo",
    "SlurmAgentError",
    "SlurmError",
    "SlurmNotFoundError",
    "SlurmSettings",
    "SlurmSubmitError",
    "cancel",
    "exec_script",
    "find_jobs",
    "is_final",
    "is_infrastructure_failure",
    "job_name",
    "parse_squeue",
    "parse_time_limit",
    "query",
    "reserved_option",
    "run_job_prefix",
    "sbatch_command",
    "slurm_version",
    "submit",
]
