"""Energy estimate for machines without a measurable GPU: constant watts x time.

Two bases (``energy.basis`` in the spec):

* ``cpu-time`` (default): ``watts`` x the CPU time of the trial's processes,
  counted at most at ``watts`` (so never more than ``watts`` x wall time).
  The job is charged for the work it did, not for the time the scheduler gave
  to other programs: on a loaded machine its energy stays what it was on an
  idle one (its wall time still grows, and the cost's time term charges that).
* ``wall-time``: ``watts`` x wall time, whatever the job does. Use it for a job
  whose power is not drawn by the CPU (a GPU that NVML cannot measure), where
  CPU time says little about energy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from zeus_run.energy._base import EnergySource

logger = logging.getLogger(__name__)

BASES = ("cpu-time", "wall-time")


class EstimatedEnergy(EnergySource):
    """Assumes the job draws ``watts`` while it runs. Clearly an estimate, never a measurement."""

    name = "estimate"
    estimated = True

    def __init__(self, watts: float, clock: Callable[[], float] = time.monotonic, basis: str = "wall-time") -> None:
        """Args:
        watts: Assumed power of the job while it runs (unit: W); also the max power for the cost.
        clock: Monotonic clock in seconds (injectable for tests).
        basis: ``cpu-time`` or ``wall-time`` (see the module docstring). With
            ``cpu-time`` and no trial tracked (`track`), no energy accrues.
        """
        if watts <= 0:
            raise ValueError(f"watts must be > 0, got {watts}")
        if basis not in BASES:
            raise ValueError(f"unknown estimate basis {basis!r}; use {' or '.join(BASES)}")
        self.watts = float(watts)
        self.basis = basis
        self._clock = clock
        self._t0 = clock()
        self._acc = 0.0
        self._cpu: Callable[[], float] | None = None
        self._last_cpu = 0.0
        self._tracked_at = self._t0
        self._charged = 0.0
        self._owed = 0.0  # CPU time not charged yet (unit: s)

    @property
    def method(self) -> str:
        return "watts-x-cpu-time" if self.basis == "cpu-time" else "watts-x-time"

    @property
    def max_power(self) -> float:
        return self.watts

    def power(self) -> float | None:
        """``watts`` on the wall-time basis; None on the CPU-time basis (its power is the CPU time's rate)."""
        return self.watts if self.basis == "wall-time" else None

    def track(self, cpu_seconds: Callable[[], float] | None) -> None:
        """Charge the CPU time ``cpu_seconds()`` reports from now on (None: stop)."""
        self.read()  # settle what accrued so far under the previous tracker
        self._cpu = cpu_seconds
        self._last_cpu = cpu_seconds() if cpu_seconds is not None else 0.0
        self._tracked_at = self._clock()
        self._charged = 0.0  # CPU time charged since then (unit: s)
        self._owed = 0.0

    def read(self) -> float:
        now = self._clock()
        if self.basis == "wall-time":
            return self.watts * (now - self._t0)
        if self._cpu is not None:
            cpu = self._cpu()
            # CPU time is charged at most at the rate of the wall clock since the
            # tracking began; CPU time beyond that (several busy threads, or a reading
            # that arrived a clock tick early) is carried over and charged when there
            # is room. A reading may bring time spent long before it (a child's, once
            # its parent reaped it), so the room is the whole time tracked.
            self._owed += max(cpu - self._last_cpu, 0.0)
            charge = min(self._owed, max(now - self._tracked_at - self._charged, 0.0))
            self._owed -= charge
            self._charged += charge
            self._acc += self.watts * charge
            self._last_cpu = cpu
        return self._acc

    def describe(self) -> str:
        what = "CPU time of the trial's processes" if self.basis == "cpu-time" else "time"
        return f"estimate: {self.watts:g} W x {what} (no GPU measured; energy figures are estimates)"
