"""What the Slurm executor's parts share: its timings, the launcher's view of one job (`_Job`), and retrying Slurm calls."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from zeus_run.energy import EnergySource
from zeus_run.engine.core import TrialRequest
from zeus_run.executors._base import PreparedTrial
from zeus_run.slurm import (
    UNKNOWN,
    JobInfo,
    SlurmError,
    SlurmSettings,
)
from zeus_run.spec import EnergySettings, ExecutorSettings

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
