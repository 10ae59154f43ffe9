"""The ``executor: {kind: slurm, ...}`` settings of a job spec, and the checks its loader uses.

The spec loader (`zeus_run.spec`) validates the YAML block and builds a
`SlurmSettings`; the helpers here hold the Slurm-specific rules so that the
loader only reports what they find.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: sbatch options zeus-run sets itself for every trial; ``extra_args`` may not repeat them.
RESERVED_SBATCH_OPTIONS = (
    "--job-name",
    "-J",
    "--output",
    "-o",
    "--error",
    "-e",
    "--chdir",
    "-D",
    "--parsable",
    "--wrap",
    "--requeue",
    "--no-requeue",
    "--open-mode",
    "--export",
    "--partition",
    "-p",
    "--time",
    "-t",
    "--account",
    "-A",
    "--qos",
    "-q",
    "--gres",
    "--gpus",
    "-G",
    "--array",
    "-a",
)

_TIME_FORMS = (
    # Slurm's --time forms (sbatch(1)); each yields (days, hours, minutes, seconds).
    (re.compile(r"(\d+)"), ("m",)),
    (re.compile(r"(\d+):(\d+)"), ("m", "s")),
    (re.compile(r"(\d+):(\d+):(\d+)"), ("h", "m", "s")),
    (re.compile(r"(\d+)-(\d+)"), ("d", "h")),
    (re.compile(r"(\d+)-(\d+):(\d+)"), ("d", "h", "m")),
    (re.compile(r"(\d+)-(\d+):(\d+):(\d+)"), ("d", "h", "m", "s")),
)
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_UNLIMITED = ("UNLIMITED", "INFINITE")


@dataclass(frozen=True)
class SlurmSettings:
    """How each trial is submitted as a Slurm batch job.

    Attributes:
        partition: ``--partition``; None uses the cluster's default partition.
        gpus: GPUs per trial, requested as ``--gres=gpu:N`` (0: none). Slurm then
            sets ``CUDA_VISIBLE_DEVICES`` in the job, which is what the agent measures.
        time: ``--time`` per trial in a Slurm time format (``"02:00:00"``,
            ``"1-00:00:00"``, ``"90"`` minutes); None uses the partition's default.
            A trial that exceeds it ends as ``TIMEOUT`` (an infrastructure failure).
        account: ``--account``, or None.
        qos: ``--qos``, or None.
        extra_args: More sbatch options, passed through as written (e.g.
            ``["--constraint=a100", "--mem=64G"]``); options zeus-run sets itself
            (`RESERVED_SBATCH_OPTIONS`) are refused by the spec.
        heartbeat_timeout: Seconds a running job's agent may go without a heartbeat in the
            trial's directory: none since the job started means the run directory is not
            shared with the nodes (the run stops and says so); one that stops means the
            agent is gone (the job is cancelled, an infrastructure failure). Unit: s.
        infra_retries: Infrastructure failures in a row (`INFRASTRUCTURE_STATES`) retried
            before the run stops with an error that names them.
    """

    partition: str | None = None
    gpus: int = 1
    time: str | None = None
    account: str | None = None
    qos: str | None = None
    extra_args: tuple[str, ...] = ()
    heartbeat_timeout: float = 120.0
    infra_retries: int = 3

    @property
    def time_limit_seconds(self) -> int | None:
        """``time`` in seconds, or None when unset or unlimited."""
        return None if self.time is None else parse_time_limit(self.time)


def parse_time_limit(text: str) -> int | None:
    """Seconds in a Slurm ``--time`` value, None for ``UNLIMITED``/``INFINITE``.

    Args:
        text: ``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``,
            ``days-hours``, ``days-hours:minutes`` or ``days-hours:minutes:seconds``.

    Raises:
        ValueError: Not one of those forms, or zero (Slurm reads 0 as no limit).
    """
    value = text.strip()
    if value.upper() in _UNLIMITED:
        return None
    for pattern, units in _TIME_FORMS:
        m = pattern.fullmatch(value)
        if m:
            seconds = sum(int(g) * _UNIT_SECONDS[u] for g, u in zip(m.groups(), units, strict=True))
            if seconds == 0:
                raise ValueError("a time limit of 0 means no limit to Slurm; write UNLIMITED or leave time unset")
            return seconds
    raise ValueError(
        f"{text!r} is not a Slurm time; use hours:minutes:seconds such as '02:00:00', "
        "days-hours:minutes:seconds such as '1-00:00:00', or minutes such as '90'"
    )


def reserved_option(arg: str) -> str | None:
    """The reserved sbatch option ``arg`` sets (see `RESERVED_SBATCH_OPTIONS`), or None.

    ``--time=1:00``, ``--time`` and ``-t1:00`` all name ``--time``/``-t``.
    """
    if arg.startswith("--"):
        name = arg.split("=", 1)[0]
        return name if name in RESERVED_SBATCH_OPTIONS else None
    if arg.startswith("-") and len(arg) >= 2:
        name = arg[:2]
        return name if name in RESERVED_SBATCH_OPTIONS else None
    return None
