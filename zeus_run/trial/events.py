"""Launcher-side readers of a trial's convergence signals.

Several sources, one output (a metric value per finished epoch):

* `EventLogTail` follows the JSON-lines event log written by `zeus_run.train`.
* `RegexMetricReader` matches a regex against each line of the script's output.
* `JsonLinesMetricReader` reads one key of each JSON object line (``{"epoch": 3, "val_acc": 0.91}``).
* `NumberLineReader` takes the last number of each line (a metric file the script appends to).
* `FileMetricTail` follows a file the script appends to, with any of the line readers.

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

from zeus_run.contract import ScriptEnd

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
        #: The latest time an event was written at (Unix seconds: its ``exited`` event's at the end), None if none.
        self.last_time: float | None = None
        #: Ask/tell: the reason of a ``stop`` event (`zeus_run.asktell.report_epoch` wrote it), None if none came.
        self.stop: str | None = None
        #: Ask/tell: the exception that ended the script (an ``error`` event `zeus_run.train.Trial` wrote), if any.
        self.error: str | None = None
        #: Ask/tell: epochs read when the first ``stop`` event came (None: none came).
        self.stop_after: int | None = None
        #: Ask/tell: time and energy since the trial began at that stop, as the script measured them (None: not).
        self.stop_point: tuple[float | None, float | None] = (None, None)
        #: Ask/tell: how the training side measured the ``energy`` of its epoch events (an ``info`` event with
        #: ``measured``: ``source``, ``method``, ``estimated``, ``max_power``, ``window``), None if it did not say.
        self.measured: dict[str, Any] | None = None
        #: Ask/tell: how the script ended, as it said (its ``end`` and ``exited`` events).
        self.end = ScriptEnd()

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
        if when is not None and (self.last_time is None or when > self.last_time):
            self.last_time = when
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
            if isinstance(reason, str) and self.stop is None:
                self.stop, self.stop_after = reason, self._epochs
                self.stop_point = (_finite(ev.get("elapsed")), _finite(ev.get("energy")))
            return None
        if kind == "error":
            message = ev.get("message")
            if isinstance(message, str):
                self.error = message[-2000:]
            return None
        if kind in ("end", "exited"):
            self.end.take(ev, when)
            return None
        if kind == "info":
            if isinstance(ev.get("measured"), dict):
                self.measured = _measured(ev["measured"])
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


def _measured(raw: dict[str, Any]) -> dict[str, Any]:
    """The training side's account of its energy meter, with every field checked (untrusted)."""
    out: dict[str, Any] = {}
    for key in ("source", "method"):
        v = raw.get(key)
        if isinstance(v, str) and 0 < len(v) <= 40:
            out[key] = v
    if isinstance(raw.get("estimated"), bool):
        out["estimated"] = raw["estimated"]
    power = _finite(raw.get("max_power"))
    if power is not None and power > 0:
        out["max_power"] = power
    window = raw.get("window")
    if isinstance(window, dict) and len(window) <= 16:  # its fields are checked where it is kept (the tell)
        out["window"] = window
    return out


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


#: A number as scripts print it: signs, decimals and exponents (``-1.5``, ``4.2e-05``, ``.5``, ``nan``, ``inf``).
NUMBER = r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf(?:inity)?)"
#: `NUMBER` standing alone (not part of a word, a version or a longer number).
_NUMBER_ALONE = re.compile(rf"(?<![\w.])({NUMBER})(?!\w|\.\d)", re.IGNORECASE)


class NumberLineReader:
    """The last number of each line is the next epoch's metric (a line without one is skipped)."""

    def __init__(self) -> None:
        self.malformed = 0
        self._epochs = 0

    def feed_line(self, line: bytes) -> list[EpochEvent]:
        found = _NUMBER_ALONE.findall(line.decode("utf-8", "replace"))
        if not found:
            return []
        self._epochs += 1
        return [EpochEvent(self._epochs, parse_metric(found[-1]))]


class JsonLinesMetricReader:
    """Each JSON object line holding ``key`` is an epoch: its metric is that value, its number ``epoch`` if given.

    Other lines (plain text, JSON without the key) are the script's other output and are skipped;
    a ``key`` whose value is not a number is counted as malformed.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        self.malformed = 0
        self.diverged = 0
        self._epochs = 0

    def feed_line(self, line: bytes) -> list[EpochEvent]:
        text = line.strip()
        if not text.startswith(b"{"):
            return []
        try:
            ev = json.loads(text)
        except (ValueError, RecursionError):
            return []
        if not isinstance(ev, dict) or self.key not in ev:
            return []
        try:
            metric = parse_metric(ev[self.key])
            epoch = parse_count(ev["epoch"], "epoch") if "epoch" in ev else self._epochs + 1
        except InvalidEvent as exc:
            self.malformed += 1
            if self.malformed <= _WARN_FIRST:
                logger.warning("skipping a JSON line from the script: %s", exc)
            return []
        self._epochs = epoch
        self.diverged += math.isnan(metric)
        return [EpochEvent(self._epochs, metric, _as_float(ev.get("time")))]


class FileMetricTail:
    """Follows a file the script appends to and reads its new lines with ``reader`` (a line reader above).

    The same interface as `EventLogTail` (``poll``, ``finish``, ``malformed``, ``steps``) so a trial
    reads either. A file that is not there yet reads as empty; a file that shrinks (rewritten from
    the start) is read again from its start.
    """

    def __init__(self, path: str, reader: NumberLineReader | JsonLinesMetricReader | RegexMetricReader) -> None:
        self.path = path
        self.reader = reader
        self.offset = 0
        self.steps = 0
        #: Whether the file was there at some look, how many lines and epochs were read from it.
        self.found = False
        self.lines = 0
        self.epochs = 0
        self._split = LineSplitter()

    def no_metric_note(self) -> str:
        """Why no epoch was read from the file (for the trial's record)."""
        if not self.found:
            return f"metric.path {self.path!r} was never written (is it where the script writes its metric?)"
        return f"metric.path {self.path!r}: none of the {self.lines} line(s) appended to it held a metric"

    @property
    def malformed(self) -> int:
        return self.reader.malformed

    def poll(self) -> list[EpochEvent]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return []
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return []
            if st.st_size < self.offset:
                self.offset = 0
                self._split = LineSplitter()
            chunk = os.pread(fd, 1 << 20, self.offset)
        except OSError:
            return []
        finally:
            os.close(fd)
        self.found = True
        self.offset += len(chunk)
        return self._read(self._split.feed(chunk))

    def _read(self, lines: list[bytes]) -> list[EpochEvent]:
        self.lines += len(lines)
        out = [ev for line in lines for ev in self.reader.feed_line(line)]
        self.epochs += len(out)
        return out

    def finish(self) -> list[EpochEvent]:
        out: list[EpochEvent] = []
        while True:
            before = self.offset
            out += self.poll()
            if self.offset == before:
                break
        return out + self._read(self._split.flush())


def remove_quietly(path: str) -> None:
    """Delete a file if it exists."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
