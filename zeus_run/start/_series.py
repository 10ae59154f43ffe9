"""A step series of carbon intensity with prefix sums: the mean over any span in O(log n), partial steps weighted.

A row ``(t_i, v_i)`` holds from ``t_i`` to the next row's time (as `zeus_run.accounting.Rate.at` reads a
series); before the first row the first value holds, after the last row the last value. The mean over
``[a, b]`` is the integral over that span divided by its length, so a span that covers part of a step counts
that step by the part it covers (a window average that ignored partial steps was a reported bug in CATS).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from zeus_run.accounting import read_series


class Series:
    """A step series (times in Unix seconds, sorted; values per kWh) with its running integral."""

    __slots__ = ("_step", "last_index", "prefix", "times", "values")

    def __init__(self, times: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray) -> None:
        t = np.asarray(times, dtype=float)
        v = np.asarray(values, dtype=float)
        if t.ndim != 1 or t.shape != v.shape or not len(t):
            raise ValueError("a series needs one value per time, and at least one row")
        if len(t) > 1 and bool((t[1:] < t[:-1]).any()):
            order = np.argsort(t, kind="stable")
            t, v = t[order], v[order]
        self.times = t
        self.values = v
        self.prefix = np.empty(len(t))
        self.prefix[0] = 0.0
        np.cumsum(v[:-1] * (t[1:] - t[:-1]), out=self.prefix[1:])
        self.last_index = len(t) - 1
        self._step: float | None = None

    @property
    def step(self) -> float:
        """The usual distance between rows (the last row holds for one more of it, for `covers`)."""
        if self._step is None:
            widths = np.diff(self.times[-51:])
            self._step = float(np.median(widths)) if len(widths) else 0.0
        return self._step

    @classmethod
    def read(cls, path: str | Path, shown: str | None = None) -> Series:
        """The ``timestamp,value`` CSV at ``path`` (`zeus_run.accounting.read_series`'s format and errors)."""
        rate = read_series(Path(path), shown=shown)
        return cls(rate.times, rate.values)

    @property
    def first(self) -> float:
        return float(self.times[0])

    @property
    def last(self) -> float:
        return float(self.times[-1])

    def covers(self, lo: float, hi: float) -> bool:
        """Whether rows exist from ``lo`` (a row at or before it) to ``hi`` (the last row at or before it, within a
        step of it)."""
        return bool(self.times[0] <= lo and self.times[-1] + self.step >= hi)

    def cumulative(self, x: float | np.ndarray) -> np.ndarray:
        """The integral from the first row to ``x`` (unit: value x s; negative before the first row)."""
        x = np.asarray(x, dtype=float)
        k = np.maximum(np.searchsorted(self.times, x, side="right") - 1, 0)  # at most the last index already
        return self.prefix[k] + self.values[k] * (x - self.times[k])

    def mean(self, a: float | np.ndarray, b: float | np.ndarray) -> np.ndarray:
        """The mean over ``[a, b]`` (elementwise; a span of zero length: the value at ``a``)."""
        a = np.asarray(a, dtype=float)
        b = np.asarray(b, dtype=float)
        width = b - a
        safe = np.where(width > 0, width, 1.0)
        return np.where(width > 0, (self.cumulative(b) - self.cumulative(a)) / safe, self.at(a))

    def at(self, x: float | np.ndarray) -> np.ndarray:
        """The value in force at ``x``."""
        k = np.maximum(np.searchsorted(self.times, np.asarray(x, dtype=float), side="right") - 1, 0)
        return self.values[k]

    def window(self, lo: float, hi: float) -> Series:
        """The rows that hold over ``[lo, hi]`` (the row in force at ``lo`` first)."""
        i0 = max(int(np.searchsorted(self.times, lo, side="right")) - 1, 0)
        i1 = max(int(np.searchsorted(self.times, hi, side="left")), i0 + 1)
        return Series(self.times[i0:i1], self.values[i0:i1])

    def breakpoints(self, lo: float, hi: float) -> np.ndarray:
        """The row times strictly inside ``(lo, hi)``."""
        i0 = int(np.searchsorted(self.times, lo, side="right"))
        i1 = int(np.searchsorted(self.times, hi, side="left"))
        return self.times[i0:i1]
