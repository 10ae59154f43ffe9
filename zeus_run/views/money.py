"""A run's carbon and money against always running the default (`account`), from its ``accounting`` rates.

The rates, their time series and the spec section are `zeus_run.accounting`; the periods a changed
section started on resume are `zeus_run.rundir.rates`. The saving follows the one rule of every
saving (`zeus_run.views.saving`, `zeus_run.views.evidence`), its interval being the energy saving's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeus_run import _units
from zeus_run.accounting import J_PER_KWH, AccountingSettings, Period, Rate

if TYPE_CHECKING:
    from zeus_run.records import TrialRecord
    from zeus_run.views.saving import Saved
    from zeus_run.views.summary import Summary


@dataclass(frozen=True)
class Accounting:
    """A run's carbon and money, and the same for always running the default.

    Attributes:
        currency: Currency code of the money figures.
        carbon_g: Total of every trial (unit: gCO2e), or None without a carbon rate.
        money: Total of every trial (unit: ``currency``), or None without a price.
        carbon: The whole history's carbon saving against the default (`zeus_run.views.saving.Saved`:
            what every try emitted against what the default would have, its interval), None without a
            rate or a baseline.
        money_saved: The same in money.
        steady: The steady state's energy saving, which is its carbon and money saving too (a rate
            charges a recurrence and the default's alike), None without a steady state.
        periods: The rates and the recurrence each applied from (one period unless the section changed
            on resume: `zeus_run.rundir.rates`).
    """

    currency: str
    carbon_g: float | None
    money: float | None
    carbon: Saved | None = None
    money_saved: Saved | None = None
    steady: Saved | None = None
    periods: tuple[Period, ...] = ()

    @property
    def default_carbon_g(self) -> float | None:
        """What the default would have emitted over the same recurrences (unit: gCO2e)."""
        return self.carbon.default if self.carbon is not None else None

    @property
    def default_money(self) -> float | None:
        """What the default would have cost in money over the same recurrences."""
        return self.money_saved.default if self.money_saved is not None else None

    @property
    def carbon_saving(self) -> float | None:
        """``1 - carbon_g / default_carbon_g``."""
        return self.carbon.value if self.carbon is not None else None

    @property
    def money_saving(self) -> float | None:
        """``1 - money / default_money``."""
        return self.money_saved.value if self.money_saved is not None else None

    def to_json(self) -> dict[str, Any]:
        """Totals, and each saving with its 90% interval beside it (``*_ci``: ``[low, high]``, fractions)."""
        steady = self.steady
        return {
            "currency": self.currency,
            "carbon_g": self.carbon_g,
            "money": self.money,
            "default_carbon_g": self.default_carbon_g,
            "default_money": self.default_money,
            "carbon_saving": self.carbon_saving,
            "carbon_saving_ci": _ci(self.carbon),
            "money_saving": self.money_saving,
            "money_saving_ci": _ci(self.money_saved),
            "steady_carbon_saving": steady.value if steady is not None and self.carbon_g is not None else None,
            "steady_carbon_saving_ci": _ci(steady) if self.carbon_g is not None else None,
            "steady_money_saving": steady.value if steady is not None and self.money is not None else None,
            "steady_money_saving_ci": _ci(steady) if self.money is not None else None,
            "saved": {
                "carbon": self.carbon.to_json() if self.carbon is not None else None,
                "money": self.money_saved.to_json() if self.money_saved is not None else None,
            },
            "periods": [
                {
                    "from_recurrence": p.first,
                    "carbon_g_per_kwh": p.settings.carbon_g_per_kwh,
                    "price_per_kwh": p.settings.price_per_kwh,
                    "currency": p.settings.currency,
                }
                for p in self.periods
            ],
        }

    def lines(self) -> list[str]:
        """Plain-text lines for the summary (no markup): each total against the default's, with its interval."""
        from zeus_run.views.saving import words

        out = []
        for name, total, saved, fmt in (
            ("Carbon", self.carbon_g, self.carbon, _units.carbon),
            ("Money", self.money, self.money_saved, lambda v: _units.money(v, self.currency)),
        ):
            if total is None:
                continue
            out.append(f"{name}: {words(saved, fmt)}" if saved is not None else f"{name}: {fmt(total)}")
        if len(self.periods) > 1:
            out.append("Rates: " + "; ".join(_period_text(p) for p in self.periods))
        return out

    def subtitle(self) -> str:
        """One short line for a plot's title: totals, and the saving against the default where known."""
        from zeus_run.views.saving import short

        parts = []
        for total, saved, fmt in (
            (self.carbon_g, self.carbon, _units.carbon),
            (self.money, self.money_saved, lambda v: _units.money(v, self.currency)),
        ):
            if total is not None:
                parts.append(fmt(total) + (f" ({short(saved)} against the default)" if saved is not None else ""))
        return "; ".join(parts)


def _ci(saved: Saved | None) -> list[float] | None:
    return list(saved.ci) if saved is not None and saved.ci is not None else None


def _period_text(p: Period) -> str:
    def shown(v: float | str) -> str:
        return repr(v) if isinstance(v, str) else f"{v:g}"

    parts = []
    if p.settings.carbon_g_per_kwh is not None:
        parts.append(f"carbon {shown(p.settings.carbon_g_per_kwh)} g/kWh")
    if p.settings.price_per_kwh is not None:
        parts.append(f"price {shown(p.settings.price_per_kwh)} {p.settings.currency}/kWh")
    return f"from recurrence {p.first}: " + (", ".join(parts) or "none")


def account(
    records: Sequence[TrialRecord],
    settings: AccountingSettings,
    summary: Summary | None = None,
    base: Path | None = None,
    periods: Sequence[Period] = (),
) -> Accounting | None:
    """Carbon and money of ``records`` under ``settings`` (None when no period sets a rate).

    Args:
        records: The history.
        settings: The ``accounting`` section (of every recurrence, unless ``periods`` says otherwise).
        summary: The records' summary (`zeus_run.views.summary.summarize`): the default, the
            recurrences compared, the slow ones and the spread the intervals rest on. None: totals only.
        base: Folder that relative CSV paths start at.
        periods: The rates by the recurrence they applied from (`zeus_run.rundir.rates.periods`);
            empty: ``settings`` throughout.

    Raises:
        AccountingError: A rate series cannot be read.
    """
    periods = tuple(sorted(periods, key=lambda p: p.first)) or (Period(1, settings),)
    if not any(p.settings.enabled for p in periods):
        return None
    carbon = [(p.first, _rate(p.settings.carbon_g_per_kwh, base)) for p in periods]
    price = [(p.first, _rate(p.settings.price_per_kwh, base)) for p in periods]
    currency = periods[-1].settings.currency
    starts: dict[int, str | None] = {}
    for r in records:
        starts.setdefault(r.recurrence, r.triggered_at or r.started_at)  # the default's side: started on time

    def total(rates: list[tuple[int, Rate | None]]) -> float | None:
        if all(rate is None for _, rate in rates):
            return None
        return sum(r.energy / J_PER_KWH * _at(rates, r.recurrence, r.started_at, r.ended_at) for r in records)

    def saved(rates: list[tuple[int, Rate | None]], spent: float | None) -> Saved | None:
        if spent is None or summary is None or summary.baseline is None:
            return None
        from zeus_run.views import saving as est

        energy = summary.saved.get("energy")
        b0 = summary.baseline
        nights = summary.nights  # the one accounting of each night (`zeus_run.views.nights`)
        certain = sum(
            n.held(lambda r: r.energy / J_PER_KWH * _at(rates, r.recurrence, r.started_at, r.ended_at)) for n in nights
        )
        expected = sum(
            n.default_runs * b0.energy / J_PER_KWH * _at(rates, n.recurrence, starts.get(n.recurrence), span=b0.time)
            for n in nights
            if n.compared
        )
        extra = sum(
            (n.most - n.default_runs)
            * b0.energy
            / J_PER_KWH
            * _at(rates, n.recurrence, starts.get(n.recurrence), span=b0.time)
            for n in nights
        )
        spread = summary.spread
        return est.whole_history(
            spent,
            certain,
            expected,
            spread.of_default("energy"),
            b0.runs,
            spread.df_of("energy"),
            b0.batch_size,
            energy.same if energy is not None else False,
            extra,
        )

    carbon_g, money = total(carbon), total(price)
    steady = summary.steady.saved.get("energy") if summary is not None and summary.steady is not None else None
    return Accounting(
        currency,
        carbon_g,
        money,
        saved(carbon, carbon_g),
        saved(price, money),
        steady,
        periods if len(periods) > 1 else (),
    )


def _rate(value: float | str | None, base: Path | None) -> Rate | None:
    return Rate.of(value, base) if value is not None else None


def _at(
    rates: Sequence[tuple[int, Rate | None]],
    recurrence: int,
    started_at: str | None,
    ended_at: str | None = None,
    span: float | None = None,
) -> float:
    """The rate for ``recurrence`` (its period's) over its span from ``started_at`` (to ``ended_at``, or ``span``
    seconds long; `zeus_run.accounting.Rate.over`); 0 where that period sets none."""
    rate = None
    for first, r in rates:
        if first <= recurrence:
            rate = r
    if rate is None and rates and recurrence < rates[0][0]:
        rate = rates[0][1]
    return rate.over(started_at, ended_at, span) if rate is not None else 0.0
