"""The ``start`` spec section: when a recurrence is due, where its forecast comes from, and the least saving worth a move.

```yaml
start: {by: "07:00", forecast: {csv: grid_forecast.csv}, min_saving: 0.05}
start: {within: 8h, forecast: persistence}
```
"""

from __future__ import annotations

from dataclasses import dataclass

#: Default ``start.min_saving``: do not move for less (share of the on-time carbon).
MIN_SAVING = 0.0
#: Providers known by name, with the environment variable that holds their token.
PROVIDERS = {"electricitymaps": "ELECTRICITYMAPS_TOKEN", "watttime": "WATTTIME_TOKEN"}


@dataclass(frozen=True)
class StartSettings:
    """Start when the grid is clean (docs/starting-clean.md); without ``by`` or ``within``, every run starts on time.

    Attributes:
        by: Due by this time of day, HH:MM in UTC, the first after the
            trigger.
        within: Due this long after the trigger (``8h``, ``90m``, ``1h30m``).
        forecast: Where the forecast comes from: ``{csv: PATH}`` (a CSV of timestamp,value rows, relative to the
            spec file), ``persistence`` (the same hours a day earlier of the intensity series),
            ``{provider: electricitymaps, zone: GB}`` (its token from the environment; a stub in this release:
            write the provider's forecast to a CSV), or ``none`` (start on time). Default: the
            ``accounting.carbon_g_per_kwh`` CSV where one is set, else none. Resolved as ``csv:/abs/path``,
            ``persistence``, ``provider:NAME/ZONE`` or ``none``.
        min_saving: Do not move a start for a saving (after the forecast's measured error) at or below this share of
            starting on time.
    """

    by: str | None = None
    within: str | None = None
    forecast: str | None = None
    min_saving: float = MIN_SAVING

    @property
    def enabled(self) -> bool:
        """Whether a deadline is set (no ``start`` section: nothing changes)."""
        return self.by is not None or self.within is not None
