"""zeus-voi: the value-of-information walk, its re-opening, and the tempered bandit, step by step."""

from __future__ import annotations

import math
import random

import pytest

from tests.optimizer.revisions import voi
from zeus_run.optimizer import Observation, ZeusVOIOptimizer
from zeus_run.optimizer._stats import lognormal_shortfall

BS = (8, 16, 32, 64, 128)


def play(opt, costs, n=12, state=None):
    """Feed ``opt`` the cost of each batch size it asks for (None: never reaches the target).

    Returns the (batch size, stage) of each decision and the final state.
    """
    state = state if state is not None else opt.initial_state()
    out = []
    for _ in range(n):
        d = opt.decide(state)
        out.append((d.batch_size, d.stage))
        cost = costs[d.batch_size]
        state = opt.observe(state, Observation(d.batch_size, 1e9 if cost is None else cost, cost is not None))
    return out, state


def probes(decisions):
    return [b for b, stage in decisions if stage == "pruning"]


def exploited(decisions):
    return {b for b, stage in decisions if stage in ("thompson", "exploit")}  # the bandit's, before and since 10


def test_default_batch_size_runs_first_and_until_it_converges():
    opt = voi(BS, 32)
    state = opt.initial_state()
    assert opt.decide(state).batch_size == 32
    state = opt.observe(state, Observation(32, 500.0, False))  # b0 missed the target: nothing else is known
    assert opt.decide(state).batch_size == 32


def test_walk_follows_the_descent_and_stops_after_a_clear_rise():
    # Down from b0: 16 costs twice as much, so the walk turns up; 64 is cheaper, 128 five times dearer.
    costs = {8: 400.0, 16: 200.0, 32: 100.0, 64: 60.0, 128: 300.0}
    decisions, _ = play(voi(BS, 32, seed=1, revision=6), costs)
    assert probes(decisions) == [32, 16, 64, 128]  # 8, beyond a doubling, is never run
    assert exploited(decisions) == {64}
    # Revision 7: the fall from 16 to 32 (log -0.69) is steep and sure, so the walk strides to 128, which
    # rose; from 32 the descent still goes on into 64, which is checked back and is the best.
    decisions, _ = play(voi(BS, 32, seed=1), costs)
    assert probes(decisions) == [32, 16, 128, 64]
    assert exploited(decisions) == {64}


def test_cost_rising_on_both_sides_of_b0_ends_the_walk_at_once():
    decisions, _ = play(voi(BS, 32, seed=1), {8: 300.0, 16: 150.0, 32: 100.0, 64: 160.0, 128: 320.0})
    assert probes(decisions) == [32, 16, 64]
    assert exploited(decisions) == {32}


def test_walk_crosses_a_flat_stretch_where_probes_are_cheap():
    decisions, _ = play(voi(BS, 32, seed=1), {8: 100.0, 16: 98.0, 32: 100.0, 64: 103.0, 128: 200.0})
    assert probes(decisions) == [32, 16, 8, 64, 128]


def test_an_end_that_missed_the_target_closes_its_side():
    decisions, _ = play(voi(BS, 32, seed=1), {8: 50.0, 16: None, 32: 100.0, 64: 101.0, 128: 200.0})
    assert 8 not in probes(decisions)  # cheap, but beyond a batch size that failed
    assert probes(decisions)[:2] == [32, 16] and 16 not in exploited(decisions)


def test_short_planning_horizon_explores_less():
    # An open-ended job expected to live one recurrence (`lifetime: 1`) against the default 100.
    costs = {8: 100.0, 16: 98.0, 32: 100.0, 64: 103.0, 128: 200.0}
    far, _ = play(voi(BS, 32, seed=1), costs)
    near, _ = play(voi(BS, 32, seed=1).with_horizon(None, 1), costs)
    assert len(probes(near)) < len(probes(far))
    assert probes(near)[0] == 32


def test_an_unlucky_end_is_reopened_when_the_leader_turns_out_dearer():
    """A single high cost after a steep descent stops the walk; the leader's later costs re-open it."""
    bs = (512, 1024, 2048, 4096, 8192, 16384)
    opt = voi(bs, 1024, seed=1)
    first = {512: 430.0, 1024: 250.0, 2048: 157.0, 4096: 229.0, 8192: 120.0, 16384: 100.0}
    decisions, state = play(opt, first, n=6)
    # 2048 looks best after one lucky run (revision 7 strides from 1024 to 4096 and checks 2048 back)
    assert probes(decisions) == [1024, 512, 4096, 2048]
    assert exploited(decisions) == {2048}
    # 2048's later runs cost more (its first was lucky): the walk resumes beyond 4096.
    later = {**first, 2048: 195.0}
    decisions, _ = play(opt, later, n=8, state=state)
    assert 8192 in probes(decisions)


def test_thompson_is_tempered_and_seeded():
    costs = {8: 400.0, 16: 200.0, 32: 100.0, 64: 60.0, 128: 300.0}
    _, state = play(voi(BS, 32, seed=1), costs, n=5)  # the walk is over after 4 probes
    greedy = type("Greedy", (ZeusVOIOptimizer,), {"TS_SCALE": 0.0})(BS, 32, seed=1)
    assert {greedy.decide(state).batch_size for _ in range(5)} == {64}
    a, b = voi(BS, 32, seed=7), voi(BS, 32, seed=7)
    assert a.decide(state) == b.decide(state)


def test_estimates_pool_relative_variance():
    opt = voi(BS, 32)
    state = opt.initial_state()
    for bs, cost in ((32, 100.0), (32, 120.0), (16, 50.0)):
        state = opt.observe(state, Observation(bs, cost, True))
    # 32: mean 110, SS 200 -> relative SS 200/110^2; pooled with 1 prior dof at 0.01.
    cv2 = (200.0 / 110.0**2 + 0.01) / 2.0
    est, pooled = opt.posterior(state)
    assert pooled == pytest.approx(cv2)
    w = ZeusVOIOptimizer.VARIANCE_PRIOR_WEIGHT
    assert est[32].mean == pytest.approx(110.0)
    assert est[32].var == pytest.approx((200.0 + w * cv2 * 110.0**2) / (1 + w) / 2)
    assert est[16].var == pytest.approx(cv2 * 50.0**2)  # one cost: the pooled relative variance


def test_window_keeps_recent_costs():
    opt = voi(BS, 32, window_size=2)
    state = opt.initial_state()
    for cost in (1000.0, 100.0, 100.0):
        state = opt.observe(state, Observation(32, cost, True))
    assert opt.posterior(state)[0][32].mean == pytest.approx(100.0)
    with pytest.raises(ValueError, match="window_size"):
        voi(BS, 32, window_size=-1)


def test_knobs_it_does_not_use_are_reported(caplog):
    from zeus_run.optimizer import make_optimizer
    from zeus_run.spec import OptimizerSettings

    with caplog.at_level("WARNING"):
        make_optimizer(OptimizerSettings.for_policy("zeus-voi"), BS, 32, 1)
    assert caplog.records == []  # its own defaults are silent
    with caplog.at_level("WARNING"):
        make_optimizer(OptimizerSettings.for_policy("zeus-voi", pruning_rounds=2, prior_mean=-5.0), BS, 32, 1)
    messages = [r.getMessage() for r in caplog.records]
    assert any("optimizer.pruning_rounds = 2 has no effect on the zeus-voi policy" in m for m in messages)
    assert any("optimizer.prior_mean = -5.0" in m for m in messages)


def test_observing_an_unknown_batch_size_is_an_error():
    opt = voi(BS, 32)
    with pytest.raises(ValueError, match="not one of"):
        opt.observe(opt.initial_state(), Observation(48, 1.0, True))


@pytest.mark.parametrize(("mu", "sd", "target"), [(0.0, 0.3, 1.0), (0.5, 0.2, 1.2), (-0.2, 0.5, 0.6), (1.0, 0.1, 2.0)])
def test_lognormal_shortfall_matches_monte_carlo(mu, sd, target):
    rng = random.Random(0)
    draws = [math.exp(rng.gauss(mu, sd)) for _ in range(200_000)]
    mc = sum(max(0.0, target - c) for c in draws) / len(draws)
    assert lognormal_shortfall(mu, sd, target) == pytest.approx(mc, rel=0.03, abs=1e-4)


def test_lognormal_shortfall_edge_cases():
    assert lognormal_shortfall(0.0, 0.0, 2.0) == pytest.approx(1.0)  # certain cost 1
    assert lognormal_shortfall(1.0, 0.0, 2.0) == 0.0
    assert lognormal_shortfall(0.0, 0.3, 0.0) == 0.0
