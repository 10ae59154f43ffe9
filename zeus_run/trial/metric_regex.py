"""Reading the metric from a script's output, bounded in line length and time (`BoundedRegex`).

The reader is a user's regex (``metric.source: regex``) or the JSON-lines reader
(``metric.source: jsonl`` without a ``path``: one JSON object per epoch on stdout).
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import threading
from typing import TYPE_CHECKING, Any

from zeus_run.trial.events import (
    EpochEvent,
    EventLogTail,
    FileMetricTail,
    JsonLinesMetricReader,
    LineSplitter,
    NumberLineReader,
    RegexMetricReader,
)

if TYPE_CHECKING:
    from zeus_run.contract import TrialPlan

logger = logging.getLogger(__name__)

#: Longest output line (after splitting at ``\r``) a metric regex is matched against (unit: characters).
REGEX_LINE_LIMIT = 4096
#: Longest time one line may take to match (unit: s); a slower line is skipped.
REGEX_LINE_TIME = 0.25
#: Lines that took too long before regex matching is switched off for the trial.
REGEX_SLOW_LIMIT = 3
#: Output lines with no regex match after which the launcher says so.
NO_MATCH_LINES = 200


class _AlarmTimeout(Exception):
    pass


class BoundedRegex:
    """Matches the metric regex against output lines with bounded length and time.

    Each line is split at ``\\r`` (progress bars) and each piece is cut to
    `REGEX_LINE_LIMIT` characters. In the main thread, a SIGALRM timer bounds
    each match to `REGEX_LINE_TIME` (Python's ``re`` checks for signals while it
    backtracks); after `REGEX_SLOW_LIMIT` slow lines matching is switched off.
    Elsewhere only the length bound holds.
    """

    def __init__(self, pattern: str, reader: JsonLinesMetricReader | None = None, what: str | None = None) -> None:
        self.pattern = pattern
        self.reader: RegexMetricReader | JsonLinesMetricReader = reader or RegexMetricReader(pattern)
        #: How messages name the source (``metric.regex '...'``, ``metric.key 'val_acc'``).
        self.what = what or f"metric.regex {pattern!r}"
        self.lines = 0
        self.hits = 0
        self.slow = 0
        self.cut = 0
        self.off = False
        self.recent: collections.deque[str] = collections.deque(maxlen=5)
        self.warned = False
        self._armed = False
        self._old_handler: Any = None
        self._timed = False

    def __enter__(self) -> BoundedRegex:
        if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
            old = signal.getsignal(signal.SIGALRM)
            if old in (signal.SIG_DFL, signal.SIG_IGN, None):
                self._old_handler = old
                signal.signal(signal.SIGALRM, self._on_alarm)
                self._timed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old_handler)
            self._timed = False

    def _on_alarm(self, _signum: int, _frame: object) -> None:
        if self._armed:
            self._armed = False
            raise _AlarmTimeout

    def feed_line(self, line: bytes) -> list[EpochEvent]:
        self.lines += 1
        text = line.decode("utf-8", "replace").strip()
        if text:
            self.recent.append(text[:200])
        if self.off:
            return []
        out: list[EpochEvent] = []
        for piece in line.split(b"\r"):
            if not piece.strip():
                continue
            if len(piece) > REGEX_LINE_LIMIT:
                piece = piece[:REGEX_LINE_LIMIT]
                self.cut += 1
            out += self._match(piece)
            if self.off:
                break
        self.hits += len(out)
        return out

    def _match(self, piece: bytes) -> list[EpochEvent]:
        if not self._timed:
            return self.reader.feed_line(piece)
        try:
            self._armed = True
            signal.setitimer(signal.ITIMER_REAL, REGEX_LINE_TIME)
            try:
                return self.reader.feed_line(piece)
            finally:
                self._armed = False
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _AlarmTimeout:
            self.slow += 1
            logger.warning(
                "metric.regex %r took more than %g s on one output line (catastrophic backtracking?); line skipped",
                self.pattern,
                REGEX_LINE_TIME,
            )
            if self.slow >= REGEX_SLOW_LIMIT:
                self.off = True
                logger.warning(
                    "metric.regex %r was too slow on %d lines; it is not matched any more in this trial. "
                    "Simplify it (avoid nested quantifiers such as (a+)+)",
                    self.pattern,
                    self.slow,
                )
            return []

    def no_match_note(self) -> str:
        shown = "\n".join(f"  | {line}" for line in self.recent) or "  (no output)"
        return f"{self.what} matched none of the script's {self.lines} output line(s); its last lines:\n{shown}"

    def check_progress(self) -> None:
        """Warn once, early, when many lines went by without a match."""
        if not self.warned and self.hits == 0 and self.lines >= NO_MATCH_LINES:
            self.warned = True
            logger.warning(
                "%s\nFix the metric section of the job spec, or the trial runs to its end.", self.no_match_note()
            )


def metric_readers(plan: TrialPlan) -> tuple[EventLogTail | FileMetricTail | None, BoundedRegex | None]:
    """The trial's metric readers: a file to follow (the event log or a metric file), or the output's lines.

    * ``events``: the event log (`EventLogTail`);
    * ``regex``: the regex over the output; ``jsonl``: the key of each JSON object line of the output;
    * ``file`` (or ``jsonl`` with a path): the lines the script appends to ``metric_path`` after the
      trial starts, read with the regex, the key, or else as the last number of each line.
    """
    if plan.metric_path is not None:
        reader: NumberLineReader | JsonLinesMetricReader | RegexMetricReader
        if plan.metric_key is not None:
            reader = JsonLinesMetricReader(plan.metric_key)
        elif plan.metric_regex is not None:
            reader = RegexMetricReader(plan.metric_regex)
        else:
            reader = NumberLineReader()
        tail = FileMetricTail(str(plan.metric_path), reader)
        try:
            tail.offset = os.stat(plan.metric_path).st_size  # lines an earlier trial appended are not this one's
        except OSError:
            pass
        return tail, None
    regex = output_reader(plan.metric_regex, plan.metric_key)
    return (EventLogTail(str(plan.event_path)), None) if regex is None else (None, regex)


def output_reader(regex: str | None, key: str | None) -> BoundedRegex | None:
    """The reader of a metric read from the script's output: ``key``'s JSON lines, else ``regex``'s matches;
    None when neither is set (the metric is not in the output)."""
    if key is not None:
        return BoundedRegex("", JsonLinesMetricReader(key), f"metric.key {key!r} (JSON lines)")
    if regex is not None:
        return BoundedRegex(regex)
    return None


def reading_notes(
    tail: EventLogTail | FileMetricTail | None, regex: BoundedRegex | None, splitter: LineSplitter, notes: list[str]
) -> int:
    """Log what reading a finished trial's metric skipped, put a regex that never matched first in ``notes``,
    and return how many malformed metric lines were ignored."""
    if regex is not None and regex.hits == 0:
        notes.insert(0, regex.no_match_note())
    if isinstance(tail, FileMetricTail) and tail.epochs == 0:
        notes.insert(0, tail.no_metric_note())
    if regex is not None and regex.cut:
        logger.info(
            "%d output line(s) longer than %d characters were matched on their start only", regex.cut, REGEX_LINE_LIMIT
        )
    malformed = (tail.malformed if tail else 0) + (regex.reader.malformed if regex else 0)
    if malformed:
        logger.warning("ignored %d malformed metric line(s) from the script", malformed)
    if splitter.overlong:
        logger.info(
            "%d output line(s) longer than 64 KiB were cut in the live view (the log has them whole)", splitter.overlong
        )
    return malformed
