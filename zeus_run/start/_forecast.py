"""Where a forecast of carbon intensity comes from: a CSV, persistence, a provider (a stub), or a benchmark's.

A forecast answers `Forecast.predict`: the series it would have given at ``issued_at`` for the span
``[lo, hi]``. The planner asks it for tonight and, to measure its skill, for earlier nights of the same
series (`zeus_run.start.plan`), so a source must answer for any time its data covers. Nothing here
touches the network.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from zeus_run.errors import UsageError
from zeus_run.start._series import Series
from zeus_run.start._settings import PROVIDERS
from zeus_run.start._window import DAY


class Forecast(Protocol):
    """A source of forecasts."""

    @property
    def provenance(self) -> str:
        """Where it comes from, for the record and for `when` (e.g. ``csv:grid.csv``)."""
        ...

    def predict(self, issued_at: float, lo: float, hi: float) -> Series:
        """The forecast issued at ``issued_at`` for ``[lo, hi]``."""
        ...


@dataclass(frozen=True)
class CsvForecast:
    """A CSV of ``timestamp,value`` rows read as the forecast, whenever it is asked.

    A CSV keeps one value per time, not the forecasts as they were issued: where its rows for earlier nights
    are what then happened, its skill on those nights is perfect by construction (`docs/starting-clean.md`).
    """

    series: Series
    provenance: str

    def predict(self, issued_at: float, lo: float, hi: float) -> Series:
        return self.series


@dataclass(frozen=True)
class Persistence:
    """Tomorrow as today: the value at ``t`` is what happened at ``t`` minus one day."""

    actual: Series
    provenance: str = "persistence"

    def predict(self, issued_at: float, lo: float, hi: float) -> Series:
        past = self.actual.window(lo - DAY, hi - DAY)
        return Series(past.times + DAY, past.values)


@dataclass(frozen=True)
class Perfect:
    """The actual series (a benchmark's upper bound)."""

    actual: Series
    provenance: str = "perfect"

    def predict(self, issued_at: float, lo: float, hi: float) -> Series:
        return self.actual


@dataclass(frozen=True)
class Noisy:
    """The actual series times ``1 + e``: ``e(t+1) = 0.9 e(t) + sqrt(0.19) S z`` (stationary deviation ``S``),
    scaled by the lead time as a fraction of ``hi - issued_at``; seeded by ``seed`` and the issue time, so the
    forecast of one night is the same whenever it is asked."""

    actual: Series
    sigma: float
    seed: int = 0
    provenance: str = "noisy"

    def predict(self, issued_at: float, lo: float, hi: float) -> Series:
        part = self.actual.window(lo, hi)
        rng = np.random.default_rng([self.seed, int(issued_at) & 0xFFFFFFFF])
        z = rng.standard_normal(len(part.times))
        # e(i) = 0.9 e(i-1) + sqrt(0.19) S z(i), e(0) = S z(0): a sum of the shocks, each decayed by 0.9 a step.
        n = len(z)
        shocks = np.sqrt(0.19) * self.sigma * z
        shocks[0] = self.sigma * z[0]
        decay = 0.9 ** np.arange(n)
        e = decay * np.cumsum(shocks / decay) if n < 600 else _ar1(shocks)
        lead = np.clip((part.times - issued_at) / max(hi - issued_at, 1.0), 0.0, 1.0)
        return Series(part.times, np.maximum(part.values * (1.0 + e * lead), 0.0))


@dataclass(frozen=True)
class Provider:
    """A provider's forecast (a stub: this release makes no network call).

    Raises on use: without its token in the environment, naming the variable; with it, saying to write the
    provider's forecast to a CSV (``start.forecast: {csv: PATH}``) instead.
    """

    name: str
    zone: str | None = None
    provenance: str = "provider"

    def predict(self, issued_at: float, lo: float, hi: float) -> Series:
        var = PROVIDERS.get(self.name, f"{self.name.upper()}_TOKEN")
        if not os.environ.get(var):
            raise UsageError(
                f"start.forecast.provider {self.name!r} needs its token in the environment variable {var}, which is "
                "not set. Set it, or write the forecast to a CSV and use start.forecast: {csv: PATH}."
            )
        raise UsageError(
            f"start.forecast.provider {self.name!r}: this release fetches no forecast over the network. Write the "
            "provider's forecast to a CSV of timestamp,value rows and use start.forecast: {csv: PATH}."
        )


def _ar1(shocks: np.ndarray) -> np.ndarray:
    """``e(i) = 0.9 e(i-1) + shocks(i)`` step by step (long series, where 0.9**i underflows the closed form)."""
    e = np.empty(len(shocks))
    e[0] = shocks[0]
    for i in range(1, len(shocks)):
        e[i] = 0.9 * e[i - 1] + shocks[i]
    return e
