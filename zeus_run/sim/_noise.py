"""Recurrence-wide slowdowns for the simulator: the noise a shared or throttled machine adds.

On a real machine a whole recurrence can run 1.5-3x slower than usual: a shared
GPU or node, a slow network file system, thermal throttling, or a Slurm
partition that hands out a slower GPU tonight. `Noise` models that: in each
recurrence, with probability ``p``, every try runs ``F`` times slower, ``F``
drawn uniformly in ``[lo, hi]``; time and energy scale alike (so the cost does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

_SPEC = re.compile(r"^\s*([0-9.]+)\s*:\s*([0-9.]+)\s*-\s*([0-9.]+)\s*$")


@dataclass(frozen=True)
class Noise:
    """Slow recurrences: probability ``p``, slowdown factor uniform in ``[lo, hi]``.

    Attributes:
        p: Probability that a recurrence runs slow, in [0, 1].
        lo: Least slowdown factor (>= 1).
        hi: Largest slowdown factor (>= lo).
    """

    p: float
    lo: float
    hi: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.p <= 1.0 or not 1.0 <= self.lo <= self.hi:
            raise ValueError(f"noise {self.describe()}: use P in [0, 1] and 1 <= LO <= HI, e.g. 0.1:1.5-3")

    @classmethod
    def parse(cls, text: str) -> Noise:
        """``P:LO-HI``, e.g. ``0.1:1.5-3``.

        Raises:
            ValueError: Not of that form, or out of range.
        """
        m = _SPEC.match(text)
        if m is None:
            raise ValueError(f"noise {text!r}: use P:LO-HI, e.g. 0.1:1.5-3")
        return cls(float(m.group(1)), float(m.group(2)), float(m.group(3)))

    def describe(self) -> str:
        return f"{self.p:g}:{self.lo:g}-{self.hi:g}"

    def factors(self, seed: int, recurrences: int) -> tuple[float, ...]:
        """Slowdown of each recurrence (1.0: normal), drawn from ``seed`` alone (independent of the optimizer)."""
        rng = np.random.default_rng([seed, 0x510E])
        slow = rng.random(recurrences) < self.p
        factor = rng.uniform(self.lo, self.hi, recurrences)
        return tuple(float(f) if s else 1.0 for s, f in zip(slow, factor, strict=True))
