"""The start planner: partial steps, the deadline, too little history, a forecast without skill, one with it."""

from __future__ import annotations

import numpy as np
import pytest

from tests.start.helpers import DAY, STEP, daily
from zeus_run.accounting import Rate
from zeus_run.errors import UsageError
from zeus_run.start import (
    CsvForecast,
    Persistence,
    Provider,
    Series,
    Window,
    best_start,
    next_clock,
    parse_duration,
    plan,
    planned,
)

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def clean_at(hour: float, length: float = 2.0, low: float = 100.0, high: float = 300.0):
    """Every day, ``low`` from ``hour`` for ``length`` hours, ``high`` otherwise."""
    return lambda t: low if hour * 3600 <= (t - T0) % DAY < (hour + length) * 3600 else high


def test_a_mean_weighs_each_step_by_the_part_of_it_a_span_covers() -> None:
    s = Series([0.0, 1800.0, 3600.0], [100.0, 300.0, 50.0])
    assert float(s.mean(900.0, 2700.0)) == pytest.approx(200.0)
    assert float(s.mean(0.0, 2700.0)) == pytest.approx((100 * 1800 + 300 * 900) / 2700)
    assert float(s.mean(1800.0, 5400.0)) == pytest.approx((300 * 1800 + 50 * 1800) / 3600)
    rate = Rate((0.0, 1800.0, 3600.0), (100.0, 300.0, 50.0))  # the accounting's series, the same rule
    assert rate.over("1970-01-01T00:15:00Z", "1970-01-01T00:45:00Z") == pytest.approx(200.0)


def test_the_best_start_is_the_lowest_mean_over_every_start_in_the_window() -> None:
    rng = np.random.default_rng(3)
    times = np.arange(0.0, 2 * DAY, STEP)
    s = Series(times, rng.uniform(50, 400, len(times)))
    w = Window(3_000.0, 3_000.0 + 10 * 3600)
    for duration in (1_000.0, 5_400.0, 7_777.0):
        start, mean, _ = best_start(s, w, duration)
        grid = np.arange(w.trigger, w.deadline - duration + 1, 30.0)
        assert w.trigger <= start <= w.deadline - duration
        assert mean <= float(s.mean(grid, grid + duration).min()) + 1e-9


def test_the_deadline_is_kept_for_the_planned_duration_whatever_the_series() -> None:
    rng = np.random.default_rng(7)
    times, values = daily(T0 - 30 * DAY, T0 + 3 * DAY, clean_at(6.0))  # the cleanest hours are at the deadline
    actual = Series(times, np.array(values) * rng.uniform(0.9, 1.1, len(values)))
    forecast = CsvForecast(actual, "csv:test")
    for k in range(20):
        runs = list(rng.uniform(3000, 9000, 8))
        w = Window.of(T0 + k * 3_600.0, within="8h")
        p = plan(w, runs, forecast)
        assert p.duration is not None and p.duration >= max(runs)
        assert w.trigger <= p.start_at and p.start_at + p.duration <= w.deadline, p


def test_too_little_history_starts_on_time_and_says_why() -> None:
    times, values = daily(T0 - 30 * DAY, T0 + 2 * DAY, clean_at(4.0))
    forecast = CsvForecast(Series(times, values), "csv:test")
    w = Window.of(T0, by="08:00")
    p = plan(w, [3600.0, 3500.0, 3700.0], forecast)
    assert not p.moved and p.start_at == w.trigger
    assert "only 3 earlier run(s)" in p.reason and "on time" in p.reason
    moved = plan(w, [3600.0, 3500.0, 3700.0, 3650.0, 3550.0], forecast)  # the same with enough runs
    assert moved.moved and moved.start_at == pytest.approx(T0 + 4 * 3600)


def test_a_forecast_without_skill_starts_on_time_and_says_why() -> None:
    # The clean hours alternate between 01:00 and 05:00 from day to day: yesterday's hours are always wrong.
    def alternating(t: float) -> float:
        day = int((t - T0) // DAY)
        return clean_at(1.0 if day % 2 else 5.0)(t)

    times, values = daily(T0 - 30 * DAY, T0 + 2 * DAY, alternating)
    actual = Series(times, values)
    w = Window.of(T0, by="08:00")
    p = plan(w, [3600.0] * 6, Persistence(actual), actual)
    assert p.promised is not None and p.promised > 0.2  # persistence promises much...
    assert p.skill is not None and p.skill <= 0  # ...and saved nothing on any earlier night
    assert not p.moved and p.start_at == w.trigger
    assert "earlier nights checked" in p.reason and "starting on time" in p.reason


def test_a_forecast_that_has_earned_it_is_followed() -> None:
    times, values = daily(T0 - 30 * DAY, T0 + 2 * DAY, clean_at(3.0))
    actual = Series(times, values)
    w = Window.of(T0, by="08:00")
    p = plan(w, [3600.0] * 6, Persistence(actual), actual)
    assert p.moved and p.start_at == pytest.approx(T0 + 3 * 3600)
    assert p.nights == 14 and p.expected == pytest.approx(p.promised)
    assert plan(w, [3600.0] * 6, Persistence(actual), actual, min_saving=0.9).moved is False  # min_saving holds it


def test_a_run_that_does_not_fit_runs_now() -> None:
    times, values = daily(T0 - 30 * DAY, T0 + 2 * DAY, clean_at(3.0))
    w = Window.of(T0, within="2h")
    p = plan(w, [3 * 3600.0] * 6, CsvForecast(Series(times, values), "csv:test"))
    assert not p.moved and "does not fit" in p.reason


def test_the_planned_duration_is_a_high_quantile_and_never_below_the_longest_run() -> None:
    d = planned([100.0] * 19 + [200.0])
    assert d.seconds is not None and d.seconds >= 200.0 and d.typical == 100.0
    assert planned([100.0] * 4).seconds is None


def test_windows_and_durations() -> None:
    assert next_clock(T0 + 6 * 3600, (7, 0)) == T0 + 7 * 3600
    assert next_clock(T0 + 7 * 3600, (7, 0)) == T0 + DAY + 7 * 3600  # at 07:00, the next 07:00
    assert Window.of(T0, by="00:00").deadline == T0 + DAY
    assert parse_duration("1h30m") == 5400.0
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("soon")


def test_a_provider_without_its_token_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ELECTRICITYMAPS_TOKEN", raising=False)
    with pytest.raises(UsageError, match="ELECTRICITYMAPS_TOKEN"):
        Provider("electricitymaps", "GB").predict(T0, T0, T0 + 3600)
