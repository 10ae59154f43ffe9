"""The simulator's noise model: recurrence-wide slowdowns (`zeus_run.sim.Noise`)."""

from __future__ import annotations

import pytest

from zeus_run.sim import JOBS, Noise, job_table, load_traces, simulate


def test_parse_and_validate():
    assert Noise.parse("0.1:1.5-3") == Noise(0.1, 1.5, 3.0)
    assert Noise.parse(" 0.05 : 2 - 3 ").describe() == "0.05:2-3"
    for bad in ("0.1", "x:1-2", "1.5:1-2", "0.1:0.5-2", "0.1:3-2"):
        with pytest.raises(ValueError, match="noise"):
            Noise.parse(bad)


def test_factors_are_drawn_per_seed_and_only_slow_some_recurrences():
    noise = Noise(0.1, 1.5, 3.0)
    a = noise.factors(7, 2000)
    assert a == noise.factors(7, 2000) and a != noise.factors(8, 2000)
    slow = [f for f in a if f != 1.0]
    assert 0.07 < len(slow) / len(a) < 0.13 and all(1.5 <= f <= 3.0 for f in slow)
    assert Noise(0.0, 1.5, 3.0).factors(7, 50) == (1.0,) * 50


def test_a_slow_recurrence_costs_its_factor_and_the_oracle_pays_the_same_noise(traces_dir):
    traces = load_traces(traces_dir / "summary_train.csv", traces_dir / "summary_power_v100.csv")
    table = job_table(traces, JOBS["squad"])
    quiet = simulate(table, seed=3, horizon=30, baselines=False)
    noisy = simulate(table, seed=3, horizon=30, baselines=False, noise=Noise(1.0, 2.0, 2.0))  # every one 2x
    assert noisy.load == pytest.approx(60.0) and noisy.oracle_cost == pytest.approx(2 * quiet.oracle_cost)
    # A uniform slowdown of every recurrence changes nothing but the bill: same decisions, double cost.
    assert [r.batch_size for r in noisy.records] == [r.batch_size for r in quiet.records]
    assert noisy.cost == pytest.approx(2 * quiet.cost) and noisy.regret == pytest.approx(quiet.regret)
