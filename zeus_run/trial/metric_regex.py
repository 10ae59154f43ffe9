"""Reading the metric from a script's output with a user's regex, bounded in line length and time (`BoundedRegex`)."""

from __future__ import annotations

import collections
import logging
import signal
import threading
from typing import Any

from zeus_run.trial.events import EpochEvent, RegexMetricReader

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

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.reader = RegexMetricReader(pattern)
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
        return (
            f"metric.regex {self.pattern!r} matched none of the script's {self.lines} output line(s); "
            f"its last lines:\n{shown}"
        )

    def check_progress(self) -> None:
        """Warn once, early, when many lines went by without a match."""
        if not self.warned and self.hits == 0 and self.lines >= NO_MATCH_LINES:
            self.warned = True
            logger.warning("%s\nFix metric.regex in the job spec, or the trial runs to its end.", self.no_match_note())
