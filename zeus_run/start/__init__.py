"""Start when the grid is clean: each recurrence starts in the lowest-carbon window before its deadline.

A pure library (no I/O but reading a CSV): the window (`Window`: trigger and deadline), the forecast
sources (`CsvForecast`, `Persistence`, `Provider`, and the benchmark's `Perfect` and `Noisy`), the duration
planned from the job's own runs (`planned`), and the planner (`plan`), which follows a forecast only where
its measured error on earlier nights still leaves a saving above ``min_saving``. See docs/starting-clean.md.

The spec's section (`StartSettings`) and the window's parsing load without numpy; the series, forecasts and
planner load on first use (the CLI's start-up does not pay for numpy).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from zeus_run.start._settings import MIN_SAVING, PROVIDERS, StartSettings
from zeus_run.start._window import DAY, Window, clock, iso, next_clock, parse_clock, parse_duration

if TYPE_CHECKING:
    from zeus_run.start._duration import MARGIN, MIN_RUNS, QUANTILE, Duration, planned
    from zeus_run.start._forecast import CsvForecast, Forecast, Noisy, Perfect, Persistence, Provider
    from zeus_run.start._plan import MIN_NIGHTS, NIGHTS, Plan, best_start, check_skill, plan
    from zeus_run.start._series import Series

_LAZY = {
    **dict.fromkeys(("MARGIN", "MIN_RUNS", "QUANTILE", "Duration", "planned"), "_duration"),
    **dict.fromkeys(("CsvForecast", "Forecast", "Noisy", "Perfect", "Persistence", "Provider"), "_forecast"),
    **dict.fromkeys(("MIN_NIGHTS", "NIGHTS", "Plan", "best_start", "check_skill", "plan"), "_plan"),
    "Series": "_series",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"zeus_run.start.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'zeus_run.start' has no attribute {name!r}")


__all__ = [
    "DAY",
    "MARGIN",
    "MIN_NIGHTS",
    "MIN_RUNS",
    "MIN_SAVING",
    "NIGHTS",
    "PROVIDERS",
    "QUANTILE",
    "CsvForecast",
    "Duration",
    "Forecast",
    "Noisy",
    "Perfect",
    "Persistence",
    "Plan",
    "Provider",
    "Series",
    "StartSettings",
    "Window",
    "best_start",
    "check_skill",
    "clock",
    "iso",
    "next_clock",
    "parse_clock",
    "parse_duration",
    "plan",
    "planned",
]
