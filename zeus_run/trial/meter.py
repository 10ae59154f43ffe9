"""A trial's meter: time, energy and cost since the trial started, frozen at the script's exit."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from zeus_run.cost import zeus_cost
from zeus_run.energy import EnergySource

if TYPE_CHECKING:
    from zeus_run.trial.run import TrialProfiler


@dataclass
class Meter:
    """Time, energy and cost of a trial since its start (unit: s, J, J)."""

    energy: EnergySource
    eta: float
    profiler: TrialProfiler | None = None
    t0: float = field(default_factory=time.monotonic)
    e0: float = 0.0
    frozen: tuple[float, float, float] | None = None

    def __post_init__(self) -> None:
        self.e0 = self.energy.read()

    def raw(self) -> tuple[float, float]:
        """Time (s) and energy (J) measured since the start."""
        return time.monotonic() - self.t0, max(self.energy.read() - self.e0, 0.0)

    def now(self) -> tuple[float, float, float]:
        """Time, energy and cost counted (observer mode accounts as if at the chosen limit).

        After `freeze`, the frozen reading (the script's exit).
        """
        if self.frozen is not None:
            return self.frozen
        t, e = self.raw()
        if self.profiler is not None:
            t, e = self.profiler.account(t, e)
        return t, e, zeus_cost(e, t, self.eta, self.energy.max_power)

    def freeze(self) -> tuple[float, float, float]:
        self.frozen = self.now()
        return self.frozen
