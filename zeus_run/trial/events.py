"""Launcher-side readers of a trial's convergence signals.

Two sources, one output (a metric value per finished epoch):

* `EventLogTail` follows the JSON-lines event log written by `zeus_run.train`.
* `RegexMetricReader` matches a regex against each line of the script's output.

Every field the script writes is untrusted. An invalid event (not JSON, not
an object, a count that is not a whole number in range, nesting deep enough to
exhaust the parser) is skipped and counted (``malformed``), with one warning
for the first; the trial goes on. A metric that is a number but not a finite
float (NaN, an infinity, ``1e999``, a 400-digit integer) is what a diverging
model reports: it counts as an epoch whose metric is NaN, which never reaches
the target. Memory stays bounded: partial lines are capped at `MAX_LINE` bytes.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

MAX_LINE = 64 * 1024
#: Largest count (epoch, step, iterations) taken from the script.
MAX_COUNT = 2**63 - 1
#: Invalid events skipped, per reader, before further ones are only counted.
_WARN_FIRST = 1


@dataclass
class EpochEvent:
    """One finished epoch as the script reported it.

    Attributes:
        epoch: Epoch number.
        metric: The validation metric; NaN when the script reported a non-finite number.
    """

    epoch: int
    metric: float
    #: The script's time of the event (Unix seconds), None if it gave none.
    time: float | None = None
    #: Ask/tell (`zeus_run.asktell.report_epoch`): time and energy since the trial began, as reported
    #: (units: s, J); None when not reported.
    elapsed: float | None = None
    energy: float | None = None


class InvalidEvent(ValueError):
    """A line from the script that is not a usable event."""


def parse_metric(value: Any) -> float:
    """A metric the script reported, as a float.

    Returns:
        The metric; NaN for a number that is not a finite float (NaN, an
        infinity, an integer too large for a float): a diverged epoch.

    Raises:
        InvalidEvent: It is not a number (a boolean, a list, a non-numeric string).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidEvent(f"metric {_short(value)} is not a number")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise InvalidEvent(f"metric {_short(value)} is not a number") from None
    try:
        f = float(value)
    except OverflowError:
        return math.nan
    return f if math.isfinite(f) else math.nan


def parse_count(value: Any, what: str) -> int:
    """A whole number in ``[0, MAX_COUNT]`` from the script (an integral float is accepted).

    Raises:
        InvalidEvent: It is not such a number.
    """
    if isinstance(value, bool):
        raise InvalidEvent(f"{what} {_short(value)} is not a whole number")
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 19:
        value = int(value.strip())
    if not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise InvalidEvent(f"{what} {_short(value)} is not a whole number in [0, 2^63)")
    return value


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, (list, dict)) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass
class LineSplitter:
    """Turns byte chunks into complete lines with a bounded buffer.

    A line longer than `MAX_LINE` is cut: its first `MAX_LINE` bytes are kept
    and the rest dropped (counted in ``overlong``).
    """

    buf: bytearray = field(default_factory=bytearray)
    overlong: int = 0
    _dropping: bool = False

    def feed(self, chunk: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            piece = chunk[start:] if nl < 0 else chunk[start:nl]
            if not self._dropping:
                room = MAX_LINE - len(self.buf)
                self.buf += piece[:room]
                if len(piece) > room:
                    self._dropping = True
                    self.overlong += 1
            if nl < 0:
                return lines
            lines.append(bytes(self.buf))
            self.buf.clear()
            self._dropping = False
            start = nl + 1

    def flush(self) -> list[bytes]:
        """The final unterminated line, if any."""
        if not self.buf:
            return []
        line = bytes(self.buf)
        self.buf.clear()
        self._dropping = False
        return [line]


class EventLogTail:
    """Reads new epoch events from a growing JSON-lines file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.malformed = 0
        self.diverged = 0
        self.steps = 0
        self.step_time: float | None = None  # script's timestamp of `steps` (unit: s)
        self.iters_per_epoch: int | None = None
        self._split = LineSplitter()
        self._epochs = 0
        self._not_a_file = False
        #: Ask/tell: the script's ``start`` event time (Unix seconds), None if none came.
        self.started: float | None = None
        #: Ask/tell: the reason of a ``stop`` event (`zeus_run.asktell.report_epoch` wrote it), None if none came.
        self.stop: str | None = None

    def poll(self) -> list[EpochEvent]:
        """Epoch events appended since the last call."""
        chunk = self._read()
        self.offset += len(chunk)
        return self._parse(self._split.feed(chunk))

    def _read(self) -> bytes:
        # NOTE: O_NONBLOCK so that a FIFO the script put in place of the log
        # cannot block the launcher's watch loop; only regular files are read.
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return b""
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                if not self._not_a_file:
                    self._not_a_file = True
                    logger.warning("the event log %s is not a regular file; ignoring it", self.path)
                return b""
            return os.pread(fd, 1 << 20, self.offset)
        except OSError:
            return b""
        finally:
            os.close(fd)

    def finish(self) -> list[EpochEvent]:
        """Everything left, including an unterminated last line."""
        out = []
        while True:
            before = self.offset
            out += self.poll()
            if self.offset == before:
                break
        return out + self._parse(self._split.flush())

    def _parse(self, lines: list[bytes]) -> list[EpochEvent]:
        out = []
        for line in lines:
            if not line.strip():
                continue
            try:
                ev = self._event(line)
            except InvalidEvent as exc:
                self._skip(str(exc))
                continue
            if ev is not None:
                if math.isnan(ev.metric):
                    self.diverged += 1
                    if self.diverged == 1:
                        logger.warning(
                            "the script reported a non-finite metric at epoch %d (the model diverged?); "
                            "such an epoch counts but never reaches the target",
                            ev.epoch,
                        )
                out.append(ev)
        return out

    def _event(self, line: bytes) -> EpochEvent | None:
        """Parse one line; None for a valid event that is not an epoch."""
        try:
            ev = json.loads(line)
        except RecursionError:
            raise InvalidEvent("JSON nested too deeply") from None
        except ValueError as exc:  # also UnicodeDecodeError, and integers past Python's digit limit
            raise InvalidEvent(f"not JSON ({exc})") from None
        if not isinstance(ev, dict):
            raise InvalidEvent(f"a JSON {type(ev).__name__}, not an object")
        kind = ev.get("event")
        t = ev.get("time")
        when = _as_float(t)
        bad_time = t is not None and when is None
        if kind == "step":
            if bad_time:
                raise InvalidEvent(f"time {_short(t)} is not a finite number")
            steps = parse_count(ev.get("n", self.steps + 1), "step count n")
            self.steps = steps
            self.step_time = when
            return None
        if kind == "start":
            if self.started is None:
                began = _as_float(ev.get("process_start"))  # the script's process start (imports count)
                self.started = began if began is not None and (when is None or began <= when) else when
            return None
        if kind == "stop":
            reason = ev.get("reason")
            self.stop = reason if isinstance(reason, str) else self.stop
            return None
        if kind == "info":
            if "iters_per_epoch" in ev:
                iters = parse_count(ev["iters_per_epoch"], "iters_per_epoch")
                self.iters_per_epoch = iters or None
            return None
        if kind != "epoch":
            if not isinstance(kind, str):
                raise InvalidEvent(f"event {_short(kind)} is not a string")
            return None
        if "metric" not in ev:
            raise InvalidEvent("an epoch event without a metric")
        metric = parse_metric(ev["metric"])
        epoch = parse_count(ev.get("epoch", self._epochs + 1), "epoch")
        self._epochs = epoch
        return EpochEvent(epoch, metric, when, _finite(ev.get("elapsed")), _finite(ev.get("energy")))

    def _skip(self, why: str) -> None:
        self.malformed += 1
        if self.malformed <= _WARN_FIRST:
            logger.warning("skipping an invalid event from the script: %s; further ones are only counted", why)


def _as_float(value: Any) -> float | None:
    """A number the script gave as a finite float, or None (not a number, not finite, too large)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _finite(value: Any) -> float | None:
    """A finite, non-negative number the script gave, or None."""
    f = _as_float(value)
    return f if f is not None and f >= 0 else None


class RegexMetricReader:
    """Each regex match in the script's output is the next epoch's metric."""

    def __init__(self, pattern: str) -> None:
        self.regex = re.compile(pattern)
        self.malformed = 0
        self.diverged = 0
        self._epochs = 0

    def feed_line(self, line: bytes) -> list[EpochEvent]:
        text = line.decode("utf-8", "replace")
        out = []
        for m in self.regex.finditer(text):
            try:
                metric = parse_metric(m.group(1))
            except (InvalidEvent, IndexError):
                self.malformed += 1
                continue
            self._epochs += 1
            if math.isnan(metric):
                self.diverged += 1
                if self.diverged == 1:
                    logger.warning(
                        "the script printed a non-finite metric %r at epoch %d (the model diverged?); "
                        "such an epoch counts but never reaches the target",
                        _short(m.group(1)),
                        self._epochs,
                    )
            out.append(EpochEvent(self._epochs, metric))
        return out


def remove_quietly(path: str) -> None:
    """Delete a file if it exists."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
