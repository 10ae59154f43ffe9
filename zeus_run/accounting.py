"""Carbon and money: what a run's joules mean, from the ``accounting`` spec section.

```yaml
accounting: {carbon_g_per_kwh: 350, price_per_kwh: 0.12, currency: USD}
accounting: {carbon_g_per_kwh: grid.csv, price_per_kwh: 0.12}   # a CSV time series: timestamp,value
```

A number is a constant rate; a string is a CSV file of ``timestamp,value`` rows (ISO-8601
timestamps, naive ones read as UTC, or Unix seconds; an optional header row). A trial is
charged at the rate in force when it started (the last row at or before its start; the first
row before the series begins); a trial with both its start and end times is charged at the
series' mean over its own span (each step weighted by the part of it the trial covers: a run
across a step in intensity pays each side's rate for its own time on it). Records without a start
time (simulated runs) are charged at the series' mean. Nothing here touches the network: for live carbon intensity, write the CSV
from your provider's data.

What a run's carbon and money are, against the default's, is `zeus_run.views.money.account`;
the saving against the default follows the one rule of every saving (`zeus_run.views.saving`):
every try is charged as it ran, at the rate in force when it started; the default's side holds
what `zeus_run.views.nights` says each night adds (the default's energy for each recurrence that
reached the target, the default batch size at the default power limit, times the machine's
slowdown where the evidence shows one; the tries counted on both sides as they ran), charged at
the rate in force when that recurrence started. Its 90% interval is the
energy saving's. Carbon is in grams of CO2e (unit: gCO2e), shown with a prefix
(`zeus_run._units.carbon`).

A changed section on resume (a new carbon intensity or price) applies from the recurrence where
it appears, with a notice, and the run directory keeps each period's rates
(`zeus_run.rundir.rates`); a changed currency is refused (one history, one currency).
"""

from __future__ import annotations

import bisect
import csv
import datetime as _dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from zeus_run.errors import UsageError

#: Joules in a kilowatt-hour.
J_PER_KWH = 3.6e6
#: Most rows a rate series may hold.
MAX_ROWS = 1_000_000


class AccountingError(UsageError):
    """A rate series cannot be read (the message names the file, the line and the fix)."""


@dataclass(frozen=True)
class AccountingSettings:
    """The ``accounting`` spec section.

    Attributes:
        carbon_g_per_kwh: Carbon intensity (unit: gCO2e/kWh), a CSV path of it, or None.
        price_per_kwh: Price of energy (unit: currency/kWh), a CSV path of it, or None.
        currency: The price's currency code (text shown next to amounts).
    """

    carbon_g_per_kwh: float | str | None = None
    price_per_kwh: float | str | None = None
    currency: str = "USD"

    @property
    def enabled(self) -> bool:
        """Whether any rate is set."""
        return self.carbon_g_per_kwh is not None or self.price_per_kwh is not None


@dataclass(frozen=True)
class Rate:
    """A constant rate, or a step series of (time, value) sorted by time (unit: per kWh)."""

    times: tuple[float, ...]
    values: tuple[float, ...]

    @classmethod
    def of(cls, value: float | str, base: Path | None = None) -> Rate:
        """A constant, or the series in the CSV at ``value`` (relative to ``base``)."""
        if isinstance(value, str):
            return read_series(Path(value) if base is None else base / value, shown=value)
        return cls((), (float(value),))

    def at(self, started_at: str | None) -> float:
        """The rate in force at ISO time ``started_at`` (None: the mean of the series)."""
        if not self.times:
            return self.values[0]
        if started_at is None:
            return sum(self.values) / len(self.values)
        i = bisect.bisect_right(self.times, _seconds(started_at)) - 1
        return self.values[max(i, 0)]

    def over(self, started_at: str | None, ended_at: str | None = None, duration: float | None = None) -> float:
        """The mean rate over ``[started_at, ended_at]`` (or ``duration`` seconds from ``started_at``), partial steps
        weighted by the part they cover; no span: the rate at ``started_at`` (`at`)."""
        if not self.times or started_at is None:
            return self.at(started_at)
        a = _seconds(started_at)
        b = _seconds(ended_at) if ended_at is not None else a + (duration or 0.0)
        if not b > a:
            return self.at(started_at)
        return (self._integral(b) - self._integral(a)) / (b - a)

    @cached_property
    def _prefix(self) -> tuple[float, ...]:
        out, total = [0.0], 0.0
        for i in range(len(self.times) - 1):
            total += self.values[i] * (self.times[i + 1] - self.times[i])
            out.append(total)
        return tuple(out)

    def _integral(self, x: float) -> float:
        """The rate integrated from the first row to ``x`` (the first value before it, the last after the end)."""
        i = min(max(bisect.bisect_right(self.times, x) - 1, 0), len(self.times) - 1)
        return self._prefix[i] + self.values[i] * (x - self.times[i])


def read_series(path: Path, shown: str | None = None) -> Rate:
    """A ``timestamp,value`` CSV as a `Rate`.

    Args:
        path: The CSV.
        shown: How errors name it (default: ``path``); the spec's own value, relative to the job.

    NOTE: an error names the file and the line number, never the line's content: a spec may point at
    a file that is no CSV (a server client's spec, say), and no line of it must reach the screen.

    Raises:
        AccountingError: Missing, unreadable or malformed (naming the line).
    """
    name = repr(str(path) if shown is None else shown)
    try:
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f))
    except OSError as exc:
        raise AccountingError(
            f"Cannot read the rate series {name}: {exc.strerror or type(exc).__name__}. Write a CSV of "
            "timestamp,value rows."
        ) from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise AccountingError(
            f"The rate series {name} is not a CSV of UTF-8 text ({type(exc).__name__}). Write a CSV of "
            "timestamp,value rows."
        ) from None
    points: list[tuple[float, float]] = []
    for n, row in enumerate(rows[:MAX_ROWS], start=1):
        if not row or not "".join(row).strip():
            continue
        why = f"{len(row)} columns, not 2"
        try:
            if len(row) != 2:
                raise ValueError(why)
            why = "the first column is not an ISO-8601 time or a number of seconds"
            t = _seconds(row[0])
            why = "the second column is not a non-negative number"
            v = float(row[1])
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(why)
        except ValueError:
            if n == 1 and not _is_time(row[0]):
                continue  # a header row
            raise AccountingError(
                f"The rate series {name}, line {n}: not a timestamp,value row ({why}); write e.g. "
                "2026-01-01T00:00:00Z,350"
            ) from None
        points.append((t, v))
    if not points:
        raise AccountingError(
            f"The rate series {name} has no timestamp,value rows; write e.g. 2026-01-01T00:00:00Z,350"
        )
    points.sort()
    return Rate(tuple(p[0] for p in points), tuple(p[1] for p in points))


def _is_time(text: str) -> bool:
    try:
        _seconds(text)
    except ValueError:
        return False
    return True


def _seconds(text: str) -> float:
    """Unix seconds of an ISO-8601 time (naive: UTC) or of a number of seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    stamp = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=_dt.timezone.utc)
    return stamp.timestamp()


@dataclass(frozen=True)
class Period:
    """The rates in force from one recurrence on (a changed ``accounting`` section on resume starts a new one).

    Attributes:
        first: First recurrence charged at these rates.
        settings: The ``accounting`` section from then on.
    """

    first: int
    settings: AccountingSettings


def settings_from(raw: Mapping[str, Any] | None) -> AccountingSettings:
    """The settings stored in a run directory's ``spec.yaml`` (absent or damaged: none)."""
    if not isinstance(raw, Mapping):
        return AccountingSettings()
    fields: dict[str, Any] = {}
    for key in ("carbon_g_per_kwh", "price_per_kwh"):
        value = raw.get(key)
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            fields[key] = value
    if isinstance(raw.get("currency"), str):
        fields["currency"] = raw["currency"]
    return AccountingSettings(**fields)
