"""Launcher-side readers of a trial's convergence signals.

Two sources, one output (a metric value per finished epoch):

* `EventLogTail` follows the JSON-lines event log written by `zeus_run.train`.
* `RegexMetricReader` matches a regex against each line of the script's output.

Malformed input is counted and skipped, never fatal. Memory stays bounded:
partial lines are capped at `MAX_LINE` bytes.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field

MAX_LINE = 64 * 1024


@dataclass
class EpochEvent:
    """One finished epoch as the script reported it."""

    epoch: int
    metric: float


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
        self.steps = 0
        self.step_time: float | None = None  # script's timestamp of `steps` (unit: s)
        self.iters_per_epoch: int | None = None
        self._split = LineSplitter()
        self._epochs = 0

    def poll(self) -> list[EpochEvent]:
        """Epoch events appended since the last call."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read(1 << 20)
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        return self._parse(self._split.feed(chunk))

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
                ev = json.loads(line)
                kind = ev["event"]
                if kind == "step":
                    self.steps = int(ev.get("n", self.steps + 1))
                    t = ev.get("time")
                    self.step_time = float(t) if t is not None else None
                    continue
                if kind == "info":
                    if "iters_per_epoch" in ev:
                        self.iters_per_epoch = int(ev["iters_per_epoch"])
                    continue
                if kind != "epoch":
                    continue
                metric = float(ev["metric"])
                epoch = int(ev.get("epoch", self._epochs + 1))
            except (ValueError, KeyError, TypeError):
                self.malformed += 1
                continue
            self._epochs = epoch
            out.append(EpochEvent(epoch, metric))
        return out


class RegexMetricReader:
    """Each regex match in the script's output is the next epoch's metric."""

    def __init__(self, pattern: str) -> None:
        self.regex = re.compile(pattern)
        self.malformed = 0
        self._epochs = 0

    def feed_line(self, line: bytes) -> list[EpochEvent]:
        text = line.decode("utf-8", "replace")
        out = []
        for m in self.regex.finditer(text):
            try:
                metric = float(m.group(1))
            except (ValueError, TypeError, IndexError):
                self.malformed += 1
                continue
            if not math.isfinite(metric):
                self.malformed += 1
                continue
            self._epochs += 1
            out.append(EpochEvent(self._epochs, metric))
        return out


def remove_quietly(path: str) -> None:
    """Delete a file if it exists."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
