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

The saving against the default is in the same units: each converged recurrence would have
cost the default batch size's mean energy, charged at the rate in force when that recurrence
started.
"""

from __future__ import annotations

import bisect
import csv
import datetime as _dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
        carbon_kg: Total (unit: kgCO2e), or None without a carbon rate.
        money: Total (unit: ``currency``), or None without a price.
        default_carbon_kg: The default batch size's mean energy over the converged recurrences
            (unit: kgCO2e), or None (no rate, or b0 never converged).
        default_money: The same in money.
    """

    currency: str
    carbon_kg: float | None
    money: float | None
    default_carbon_kg: float | None
    default_money: float | None

    @property
    def carbon_saving(self) -> float | None:
        """``1 - carbon_kg / default_carbon_kg``."""
        return _saving(self.carbon_kg, self.default_carbon_kg)

    @property
    def money_saving(self) -> float | None:
        """``1 - money / default_money``."""
        return _saving(self.money, self.default_money)

    def to_json(self) -> dict[str, Any]:
        return {
            "currency": self.currency,
            "carbon_kg": self.carbon_kg,
            "money": self.money,
            "default_carbon_kg": self.default_carbon_kg,
            "default_money": self.default_money,
            "carbon_saving": self.carbon_saving,
            "money_saving": self.money_saving,
        }

    def lines(self) -> list[str]:
        """Plain-text lines for the summary (no markup)."""
        out = []
        for name, total, default, saving, fmt in (
            ("Carbon", self.carbon_kg, self.default_carbon_kg, self.carbon_saving, lambda v: f"{v:.4g} kgCO2e"),
            ("Money", self.money, self.default_money, self.money_saving, lambda v: f"{v:.4g} {self.currency}"),
        ):
            if total is None:
                continue
            line = f"{name}: {fmt(total)}"
            if default is not None and saving is not None:
                line += f" vs {fmt(default)} always running the default ({_pct(saving)})"
            out.append(line)
        return out


def account(
    records: Sequence[TrialRecord],
    settings: AccountingSettings,
    default_batch_size: int | None,
    base: Path | None = None,
) -> Accounting | None:
    """Carbon and money of ``records`` under ``settings`` (None when it sets no rate).

    Args:
        records: The history.
        settings: The ``accounting`` section.
        default_batch_size: b0 (None: the first trial's batch size).
        base: Folder that relative CSV paths start at.

    Raises:
        AccountingError: A rate series cannot be read.
    """
    if not settings.enabled:
        return None
    if default_batch_size is None and records:
        default_batch_size = records[0].batch_size
    carbon = Rate.of(settings.carbon_g_per_kwh, base) if settings.carbon_g_per_kwh is not None else None
    price = Rate.of(settings.price_per_kwh, base) if settings.price_per_kwh is not None else None
    starts: dict[int, str | None] = {}
    for r in records:
        starts.setdefault(r.recurrence, r.started_at)
    converged = sorted({r.recurrence for r in records if r.reached})
    b0 = [r.energy for r in records if r.reached and r.batch_size == default_batch_size]
    b0_kwh = sum(b0) / len(b0) / J_PER_KWH if b0 else None

    def total(rate: Rate | None, scale: float) -> tuple[float | None, float | None]:
        if rate is None:
            return None, None
        spent = sum(r.energy / J_PER_KWH * rate.at(r.started_at) for r in records) * scale
        if b0_kwh is None or not converged:
            return spent, None
        return spent, sum(b0_kwh * rate.at(starts[n]) for n in converged) * scale

    carbon_kg, default_kg = total(carbon, 1e-3)
    money, default_money = total(price, 1.0)
    return Accounting(settings.currency, carbon_kg, money, default_kg, default_money)


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
