"""Carbon and money: what a run's joules mean, from the ``accounting`` spec section.

```yaml
accounting: {carbon_g_per_kwh: 350, price_per_kwh: 0.12, currency: USD}
accounting: {carbon_g_per_kwh: grid.csv, price_per_kwh: 0.12}   # a CSV time series: timestamp,value
```

A number is a constant rate; a string is a CSV file of ``timestamp,value`` rows (ISO-8601
timestamps, naive ones read as UTC, or Unix seconds; an optional header row). A trial is
charged at the rate in force when it started (the last row at or before its start; the first
row before the series begins). Records without a start time (simulated runs) are charged at
the series' mean. Nothing here touches the network: for live carbon intensity, write the CSV
from your provider's data.

The saving against the default is in the same units and over the same recurrences as every
other saving (`zeus_run.views.baseline`): each converged recurrence outside the slow ones
would have cost the baseline's energy (the default batch size at the default power limit),
charged at the rate in force when that recurrence started; those recurrences' own trials are
charged as they ran. Carbon is in grams of CO2e (unit: gCO2e), shown with a prefix
(`zeus_run._units.carbon`).
"""

from __future__ import annotations

import bisect
import csv
import datetime as _dt
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeus_run import _units
from zeus_run.errors import UsageError

if TYPE_CHECKING:
    from zeus_run.records import TrialRecord

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
class Accounting:
    """A run's carbon and money, and the same for always running the default.

    Attributes:
        currency: Currency code of the money figures.
        carbon_g: Total of every trial (unit: gCO2e), or None without a carbon rate.
        money: Total of every trial (unit: ``currency``), or None without a price.
        compared_carbon_g, compared_money: The same over the recurrences the saving compares
            (slow recurrences left out).
        default_carbon_g: What the default would have emitted over those recurrences (unit: gCO2e),
            or None (no rate, or no baseline yet).
        default_money: The same in money.
    """

    currency: str
    carbon_g: float | None
    money: float | None
    default_carbon_g: float | None
    default_money: float | None
    compared_carbon_g: float | None = None
    compared_money: float | None = None

    @property
    def carbon_saving(self) -> float | None:
        """``1 - compared_carbon_g / default_carbon_g``."""
        return _saving(self.compared_carbon_g, self.default_carbon_g)

    @property
    def money_saving(self) -> float | None:
        """``1 - compared_money / default_money``."""
        return _saving(self.compared_money, self.default_money)

    def to_json(self) -> dict[str, Any]:
        return {
            "currency": self.currency,
            "carbon_g": self.carbon_g,
            "money": self.money,
            "default_carbon_g": self.default_carbon_g,
            "default_money": self.default_money,
            "carbon_saving": self.carbon_saving,
            "money_saving": self.money_saving,
        }

    def lines(self) -> list[str]:
        """Plain-text lines for the summary (no markup)."""
        out = []
        for name, total, default, saving, fmt in (
            ("Carbon", self.carbon_g, self.default_carbon_g, self.carbon_saving, _units.carbon),
            ("Money", self.money, self.default_money, self.money_saving, lambda v: _units.money(v, self.currency)),
        ):
            if total is None:
                continue
            line = f"{name}: {fmt(total)}"
            if default is not None and saving is not None:
                line += f"; {_pct(saving)} than always running the default ({fmt(default)})"
            out.append(line)
        return out

    def subtitle(self) -> str:
        """One short line for a plot's title: totals, and the saving against the default where known."""
        parts = []
        for total, saving, fmt in (
            (self.carbon_g, self.carbon_saving, _units.carbon),
            (self.money, self.money_saving, lambda v: _units.money(v, self.currency)),
        ):
            if total is not None:
                parts.append(fmt(total) + (f" ({_pct(saving)} than the default)" if saving is not None else ""))
        return "; ".join(parts)


def account(
    records: Sequence[TrialRecord],
    settings: AccountingSettings,
    default_energy: float | None,
    slow: Collection[int] = (),
    base: Path | None = None,
) -> Accounting | None:
    """Carbon and money of ``records`` under ``settings`` (None when it sets no rate).

    Args:
        records: The history.
        settings: The ``accounting`` section.
        default_energy: Energy of one recurrence as the job ran before zeus-run (unit: J;
            `zeus_run.views.baseline.Baseline.energy`), None before there is one.
        slow: Slow recurrences, left out of the comparison (not of the totals).
        base: Folder that relative CSV paths start at.

    Raises:
        AccountingError: A rate series cannot be read.
    """
    if not settings.enabled:
        return None
    carbon = Rate.of(settings.carbon_g_per_kwh, base) if settings.carbon_g_per_kwh is not None else None
    price = Rate.of(settings.price_per_kwh, base) if settings.price_per_kwh is not None else None
    starts: dict[int, str | None] = {}
    for r in records:
        starts.setdefault(r.recurrence, r.started_at)
    converged = sorted({r.recurrence for r in records if r.reached} - set(slow))
    counted = [r for r in records if r.recurrence not in slow]

    def total(rate: Rate | None) -> tuple[float | None, float | None, float | None]:
        if rate is None:
            return None, None, None
        spent = sum(r.energy / J_PER_KWH * rate.at(r.started_at) for r in records)
        compared = sum(r.energy / J_PER_KWH * rate.at(r.started_at) for r in counted)
        if default_energy is None or not converged:
            return spent, compared, None
        return spent, compared, sum(default_energy / J_PER_KWH * rate.at(starts[n]) for n in converged)

    carbon_g, compared_g, default_g = total(carbon)
    money, compared_money, default_money = total(price)
    return Accounting(settings.currency, carbon_g, money, default_g, default_money, compared_g, compared_money)


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


def _saving(value: float | None, baseline: float | None) -> float | None:
    if value is None or baseline is None or baseline <= 0:
        return None
    return 1.0 - value / baseline


def _pct(v: float) -> str:
    return f"{v * 100:.1f}% less" if v >= 0 else f"{-v * 100:.1f}% more"
