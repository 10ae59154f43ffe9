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

A script whose metric is read from its output (``metric.source: regex``, or ``jsonl`` without a ``path``)
leaves the same evidence in its output log: the relay (`zeus_run.trial.output`) goes on writing it after the
launcher is gone and notes in ``output.times`` where the log stood and when, chunk by chunk.
`finished_orphan_output` reads the log with the spec's reader and dates each epoch by the chunk that ended its
line; the trial's whole process, to the end of its output, is charged (`OrphanRun.after_time`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zeus_run import _fs
from zeus_run.contract import TrialFiles, iso_seconds, reaches_target
from zeus_run.trial.events import EventLogTail
from zeus_run.trial.metric_regex import BoundedRegex

#: Most of an orphan's output log read for its epochs (unit: bytes); its stamps file is read to 1 MiB.
OUTPUT_READ_LIMIT = 256 << 20
_CHUNK = 1 << 20


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
    # The exit: the ``exited`` event's own time (the log's last event), else the log's last write (a file's
    # mtime may lag the clock by a timer tick, so it is only a fallback for a script that dated nothing).
    last = max((ev.time for ev in epochs if ev.time is not None), default=end)
    if tail.last_time is not None:
        last = max(last, tail.last_time)
    else:
        try:
            last = max(last, event_log.stat().st_mtime)
        except OSError:
            pass
    return OrphanRun(
        metrics=tuple(ev.metric for ev in epochs[: hit + 1]),
        after_metrics=tuple(ev.metric for ev in epochs[hit + 1 :]),
        time=end - start,
        after_time=max(last - end, 0.0),
    )


def finished_orphan_output(
    trial_dir: Path,
    reader: BoundedRegex,
    target: float,
    higher_is_better: bool,
    max_epochs: int,
    started_at: str | None,
) -> OrphanRun | None:
    """What the output log of a trial whose launcher died shows, if its metric read from there reached the
    target; None otherwise (or where the relay never outlived the launcher: no ``output.times``).

    Args:
        trial_dir: The trial's directory (its ``output.log`` and ``output.times``).
        reader: The spec's reader of the output (`zeus_run.trial.metric_regex.output_reader`).
        target, higher_is_better, max_epochs, started_at: As `finished_orphan`.
    """
    stamps = _stamps(trial_dir / TrialFiles.OUTPUT_TIMES)
    if len(stamps) < 2:
        return None
    (offset, relay_start), marks = stamps[0], stamps[1:]
    epochs = output_epochs(trial_dir / TrialFiles.OUTPUT, reader, offset)
    if epochs is None:
        return None
    dated = [(m, _dated(marks, at)) for m, at in epochs]
    hit = _hit([m for m, _ in dated], target, higher_is_better, max_epochs)
    if hit is None:
        return None
    start = iso_seconds(started_at)
    if start is None:
        start = relay_start
    reached = dated[hit][1]
    if reached < start:
        return None
    last = max(marks[-1][1], reached)  # the end of its output (the relay's last note)
    return OrphanRun(
        metrics=tuple(m for m, _ in dated[: hit + 1]),
        after_metrics=tuple(m for m, _ in dated[hit + 1 :]),
        time=reached - start,
        after_time=last - reached,
    )


def reached_in_output(
    log: Path, reader: BoundedRegex, target: float, higher_is_better: bool, max_epochs: int
) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """The metrics read from a whole output log through the target, and those after it; None where they do not
    reach it (or the log cannot be read). The log of a trial whose reader read nothing at the time (a typo in
    ``metric.regex``), read again under the fixed spec."""
    epochs = output_epochs(log, reader, 0)
    if epochs is None:
        return None
    metrics = [m for m, _ in epochs]
    hit = _hit(metrics, target, higher_is_better, max_epochs)
    return None if hit is None else (tuple(metrics[: hit + 1]), tuple(metrics[hit + 1 :]))


def output_epochs(log: Path, reader: BoundedRegex, offset: int) -> list[tuple[float, int]] | None:
    """Each epoch's metric ``reader`` reads from ``log`` past ``offset``, with where its line ends in the log (at
    most `OUTPUT_READ_LIMIT` bytes read); None where the log cannot be read."""
    epochs: list[tuple[float, int]] = []
    try:
        with _fs.open_read(log) as f, reader:
            f.seek(offset)
            held, pos, end = b"", offset, offset + OUTPUT_READ_LIMIT
            while pos < end:
                chunk = f.read(min(_CHUNK, end - pos))
                if not chunk:
                    break
                at = pos - len(held)  # where ``data`` starts in the log
                data, pos = held + chunk, pos + len(chunk)
                lines = data.split(b"\n")
                held = lines.pop()
                for line in lines:
                    at += len(line) + 1
                    epochs += [(ev.metric, at) for ev in reader.feed_line(line)]
            if held:
                epochs += [(ev.metric, pos) for ev in reader.feed_line(held)]
    except OSError:
        return None
    return epochs


def _hit(metrics: list[float], target: float, higher_is_better: bool, max_epochs: int) -> int | None:
    return next((k for k, m in enumerate(metrics[:max_epochs]) if reaches_target(m, target, higher_is_better)), None)


def _stamps(path: Path) -> list[tuple[int, float]]:
    """The relay's notes (offset in the log, Unix time), in order; empty where there are none."""
    try:
        with _fs.open_read(path) as f:
            text = f.read(_CHUNK).decode("ascii", "replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split()
        try:
            out.append((int(parts[0]), float(parts[1])))
        except (IndexError, ValueError):
            break  # a torn last line
    return out


def _dated(marks: list[tuple[int, float]], line_end: int) -> float:
    """When the output up to ``line_end`` was in the log: the first note at or past it (the chunk that ended the
    line; output before the launcher died has the first note's time, at most)."""
    return next((t for offset, t in marks if offset >= line_end), marks[-1][1])
