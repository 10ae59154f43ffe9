"""A trial whose launcher died: what its event log shows it did while nobody watched it (`finished_orphan`).

The script runs in a session of its own, so it outlives a launcher killed with
SIGKILL, and a script that reports through `zeus_run.train` writes each epoch
into its event log whether or not a launcher reads it. When the launcher is
relaunched and the script has exited by then, its event log is the evidence of
what it did: every epoch, with the script's time. If those epochs reach the
target, the trial reached it (the script saw so too, and saved its model), and
the relaunched launcher records it so (`zeus_run.executors.LocalExecutor`),
rather than as an interrupted trial to run again. Its energy was measured by
no one: the record says so, and its cost is charged on an imputed energy
(`zeus_run.engine.measure.PowerBasis.impute`), as a tell without a
measurement is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zeus_run.contract import iso_seconds, reaches_target
from zeus_run.trial.events import EventLogTail


@dataclass(frozen=True)
class OrphanRun:
    """The epochs an orphaned trial's event log holds, up to the one that reached the target.

    Attributes:
        metrics: Each epoch's metric, through the first that reached the target.
        after_metrics: Epochs reported after it (none unless the script trains on).
        time: From the trial's start (its launch, else the script's ``start`` event) to the epoch that
            reached the target (unit: s).
        after_time: From that epoch to the script's exit: the log's last write (its ``exited`` event, which
            `zeus_run.train` writes as the process ends), or its last event (unit: s). The save after the target
            and the exit are the trial's, as under a live launcher.
    """

    metrics: tuple[float, ...]
    after_metrics: tuple[float, ...]
    time: float
    after_time: float


def finished_orphan(
    event_log: Path, target: float, higher_is_better: bool, max_epochs: int, started_at: str | None
) -> OrphanRun | None:
    """What the event log of a trial whose launcher died shows, if it reached the target; None otherwise.

    Args:
        event_log: The trial's ``events.jsonl``.
        target: The job's target metric.
        higher_is_better: The metric's direction.
        max_epochs: The job's epoch limit (an epoch past it is not counted).
        started_at: When the launcher started the trial (ISO 8601, its ``running.json`` marker).
    """
    tail = EventLogTail(str(event_log))
    epochs = tail.finish()
    hit = next(
        (k for k, ev in enumerate(epochs[:max_epochs]) if reaches_target(ev.metric, target, higher_is_better)), None
    )
    if hit is None:
        return None
    start = iso_seconds(started_at)
    if start is None:
        start = tail.started
    end = epochs[hit].time
    if start is None or end is None or end < start:
        return None  # no time to charge
    last = max((ev.time for ev in epochs if ev.time is not None), default=end)
    try:
        last = max(last, event_log.stat().st_mtime)  # the exit (the ``exited`` event is the log's last write)
    except OSError:
        pass
    return OrphanRun(
        metrics=tuple(ev.metric for ev in epochs[: hit + 1]),
        after_metrics=tuple(ev.metric for ev in epochs[hit + 1 :]),
        time=end - start,
        after_time=max(last - end, 0.0),
    )
