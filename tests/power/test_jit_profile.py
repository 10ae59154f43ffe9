"""JitProfiler on synthetic power/throughput curves: it must pick what the policy predicts."""

from __future__ import annotations

import pytest

from zeus_run.optimizer.power_limit import JITPowerLimitOptimizer, PowerLimitMeasurement, best_power_limit
from zeus_run.power import JitProfiler

LIMITS = [300.0, 275.0, 250.0, 225.0, 200.0, 175.0, 150.0]


def power_at(limit):  # W drawn: saturates below the limit
    return min(limit, 260.0) * 0.95


def thr_at(limit):  # iterations/s: nearly flat above 250 W, dropping fast below 200 W (no exact ties)
    return (
        10.0 + 0.004 * (limit - 250)
        if limit >= 250
        else 10.0 - 0.02 * (250 - limit) - (0.0008 * (200 - limit) ** 2 if limit < 200 else 0)
    )


def drive(prof, set_calls, dt_step=0.01, max_iters=100_000, epoch_iters=None):
    """Simulate a script stepping at the current limit's throughput; the launcher polls every 50 ms."""
    t = st = e = 0.0
    steps = 0
    prof.start()
    if epoch_iters:
        prof.on_iters_per_epoch(epoch_iters)
    while not prof.done and steps < max_iters:
        lim = set_calls[-1]
        n = max(1, round(thr_at(lim) * 0.05))  # iterations per 50 ms poll
        steps += n
        st += n / thr_at(lim)
        t += n / thr_at(lim)
        e += power_at(lim) * n / thr_at(lim)
        prof.observe(steps, st, t, e)
    return steps


@pytest.mark.parametrize("eta", [0.0, 0.3, 0.5, 0.8, 1.0])
def test_profiler_picks_what_the_policy_predicts(eta):
    max_power = 300.0
    truth = [PowerLimitMeasurement(l, power_at(l), thr_at(l)) for l in LIMITS]
    expected = best_power_limit(truth, eta, max_power)
    calls: list[float] = []
    jit = JITPowerLimitOptimizer(eta, max_power)
    prof = JitProfiler(
        LIMITS,
        lambda p: jit.observe_profile(jit.initial_state(), 64, p).predict(64),
        lambda w: calls.append(w) or True,
        warmup_iters=5,
        measure_iters=20,
    )
    drive(prof, calls)
    assert prof.complete and prof.done
    assert [m.power_limit for m in prof.profile] == LIMITS
    for m, tr in zip(prof.profile, truth, strict=False):
        assert m.avg_power == pytest.approx(tr.avg_power, rel=1e-6)
        assert m.throughput == pytest.approx(tr.throughput, rel=1e-6)
    assert prof.chosen == expected
    assert calls[: len(LIMITS)] == LIMITS  # max down to min, one set per limit
    assert calls[-1] == expected  # then the rest of the trial runs at the choice


def test_eta_changes_the_choice():
    # Sanity check that the curves are not degenerate: energy-only and time-only pick differently.
    truth = [PowerLimitMeasurement(l, power_at(l), thr_at(l)) for l in LIMITS]
    assert best_power_limit(truth, 1.0, 300) < best_power_limit(truth, 0.0, 300) == 300


def test_short_epoch_scales_iterations_but_never_the_time_minimum():
    calls: list[float] = []
    prof = JitProfiler(
        LIMITS,
        lambda p: best_power_limit(p, 0.5, 300),
        lambda w: calls.append(w) or True,
        warmup_iters=10,
        measure_iters=40,
        min_window_s=2.0,
        settle_s=0.5,
    )
    steps = drive(prof, calls, epoch_iters=70)  # 7 x 50 iterations would not fit in 70
    assert (prof.warmup_iters, prof.measure_iters) == (2, 8)  # scaled by 70 / 350
    assert prof.complete
    # Profiling carried on past the 70-iteration epoch rather than shrinking the windows in time.
    assert steps > 70
    assert all(m.window_s is not None and m.window_s >= 2.0 for m in prof.profile)


def test_windows_unchanged_when_epoch_is_long():
    prof = JitProfiler(LIMITS, lambda p: 300.0, lambda w: True, warmup_iters=10, measure_iters=40)
    prof.on_iters_per_epoch(10_000)
    assert (prof.warmup_iters, prof.measure_iters) == (10, 40)


def test_observer_mode_keeps_max_and_accounts_as_if_chosen():
    calls: list[float] = []
    prof = JitProfiler(
        LIMITS, lambda p: 150.0, lambda w: calls.append(w) or True, warmup_iters=2, measure_iters=10, observer_mode=True
    )
    drive(prof, calls)
    assert prof.chosen == 150.0 and calls[-1] == 300.0  # back at the maximum
    d = prof._done_at
    # 100 s more at the max limit, accounted as if at 150 W:
    t, e = prof.account(d.time + 100.0, d.energy + 100.0 * power_at(300))
    k = thr_at(300) / thr_at(150)
    assert t == pytest.approx(d.time + 100.0 * k)
    assert e == pytest.approx(d.energy + 100.0 * k * power_at(150))


def test_stored_profile_applies_choice_at_start():
    profile = [PowerLimitMeasurement(l, power_at(l), thr_at(l)) for l in LIMITS]
    calls: list[float] = []
    prof = JitProfiler.from_profile(profile, lambda p: best_power_limit(p, 0.5, 300), lambda w: calls.append(w) or True)
    prof.start()
    assert calls == [best_power_limit(profile, 0.5, 300)]
    assert prof.account(10.0, 5.0) == (10.0, 5.0)


def test_failed_set_stops_profiling_without_raising():
    prof = JitProfiler(
        LIMITS, lambda p: 300.0, lambda w: w == 300.0, warmup_iters=1, measure_iters=2, min_window_s=0.1, min_updates=2
    )
    prof.start()
    for i in range(1, 20):
        prof.observe(i, i * 0.1, i * 0.1, i * 25.0)
    assert prof.done and not prof.complete and prof.chosen is None


def _recorded_drive(prof, calls):
    """`drive`, keeping every reading (steps, time, energy) the profiler was fed while it swept."""
    readings = []
    t = st = e = 0.0
    steps = 0
    prof.start()
    while not prof.done:
        lim = calls[-1]
        n = max(1, round(thr_at(lim) * 0.05))
        steps += n
        st += n / thr_at(lim)
        t += n / thr_at(lim)
        e += power_at(lim) * n / thr_at(lim)
        prof.observe(steps, st, t, e)
        readings.append((steps, t, e))
    return readings


@pytest.mark.parametrize("eta", [0.2, 0.5, 0.8])
def test_overhead_prices_the_sweep_against_the_same_iterations_at_the_chosen_limit(eta):
    from zeus_run.cost import zeus_cost

    calls: list[float] = []
    prof = JitProfiler(
        LIMITS, lambda p: best_power_limit(p, eta, 300), lambda w: calls.append(w) or True, 5, 20, settle_s=0
    )
    readings = _recorded_drive(prof, calls)
    (s0, t0, e0), (s1, t1, e1) = readings[0], readings[-1]
    best = next(m for m in prof.profile if m.power_limit == prof.chosen)
    at_best = (s1 - s0) / best.throughput
    expected = zeus_cost(e1 - e0 - at_best * best.avg_power, t1 - t0 - at_best, eta, 300.0)
    assert prof.overhead(eta, 300.0) == pytest.approx(expected)
    assert expected > 0  # the low limits run slower and cost more than the chosen one


def test_overhead_is_zero_where_every_limit_costs_the_same_and_none_without_a_sweep():
    flat = JitProfiler(LIMITS, lambda p: 300.0, lambda w: True, 5, 20, settle_s=0)
    flat.start()
    steps = 0
    while not flat.done:  # 10 iterations/s at 200 W whatever the limit
        steps += 1
        flat.observe(steps, steps / 10.0, steps / 10.0, 20.0 * steps)
    assert flat.overhead(0.5, 300.0) == pytest.approx(0.0, abs=1e-9)
    truth = [PowerLimitMeasurement(l, power_at(l), thr_at(l)) for l in LIMITS]
    stored = JitProfiler.from_profile(truth, lambda p: best_power_limit(p, 0.5, 300), lambda w: True)
    stored.start()
    assert stored.overhead(0.5, 300.0) is None  # profiled in an earlier trial: this one paid nothing
    abandoned = JitProfiler(LIMITS, lambda p: 300.0, lambda w: True, 5, 20, settle_s=0)
    abandoned.start()
    abandoned.observe(1, 0.1, 0.1, 20.0)
    abandoned.abandon("the script reports no steps")
    assert abandoned.overhead(0.5, 300.0) is None


def test_stall_reports_a_trial_that_measured_no_limit_and_only_that():
    def short_trial(prof, seconds):  # readings every 50 ms at 10 iterations/s, energy at 200 W
        prof.start()
        for i in range(1, int(seconds / 0.05) + 1):
            prof.observe(i, i * 0.05, i * 0.05, 10.0 * i)

    pick = lambda p: best_power_limit(p, 0.5, 300.0)  # noqa: E731
    calls: list[float] = []
    setter = lambda w: calls.append(w) or True  # noqa: E731
    prof = JitProfiler(LIMITS, pick, setter, warmup_iters=1, measure_iters=2, min_window_s=2.0, settle_s=0.5)
    short_trial(prof, 1.5)  # shorter than settle + window: nothing measured
    why = prof.stall()
    assert why is not None and "1.4 s" in why and "at 300 W" in why and "at least 2 s" in why
    longer = JitProfiler(LIMITS, pick, setter, warmup_iters=1, measure_iters=2, min_window_s=2.0, settle_s=0.5)
    short_trial(longer, 6.0)  # measures 300 W and 275 W, then the trial ends mid-sweep
    assert longer.partial and not longer.done and longer.stall() is None
    # The next trial continues that partial sweep: measuring nothing new is a stall again.
    again = JitProfiler(
        LIMITS, pick, setter, warmup_iters=1, measure_iters=2, min_window_s=2.0, settle_s=0.5, measured=longer.profile
    )
    short_trial(again, 1.0)
    assert again.stall() is not None and f"at {again.todo[0]:g} W" in again.stall()
    assert JitProfiler.from_profile(longer.profile, pick, setter).stall() is None  # nothing to sweep
    unstarted = JitProfiler(LIMITS, pick, setter)
    unstarted.start()
    assert unstarted.stall() is None  # no reading at all: not a short window (the script reported no steps)
