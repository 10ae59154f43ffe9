"""Energy estimate for machines without a measurable GPU: constant watts x time."""

from __future__ import annotations

import time

from zeus_run.energy._base import EnergySource


class EstimatedEnergy(EnergySource):
    """Assumes the job draws a constant ``watts``. Clearly an estimate, never a measurement."""

    name = "estimate"
    estimated = True

    def __init__(self, watts: float, clock=time.monotonic) -> None:
        """Args:
        watts: Assumed average power (unit: W); also the max power for the cost.
        clock: Monotonic clock in seconds (injectable for tests).
        """
        if watts <= 0:
            raise ValueError(f"watts must be > 0, got {watts}")
        self.watts = float(watts)
        self._clock = clock
        self._t0 = clock()

    @property
    def method(self) -> str:
        return "watts-x-time"

    @property
    def max_power(self) -> float:
        return self.watts

    def read(self) -> float:
        return self.watts * (self._clock() - self._t0)

    def describe(self) -> str:
        return f"estimate: {self.watts:g} W x time (no GPU measured; energy figures are estimates)"
