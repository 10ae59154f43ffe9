"""The Zeus batch-size optimizer: posterior arithmetic, pruning order, determinism, purity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from zeus_run.cost import cost_threshold, scale_learning_rate, zeus_cost
from zeus_run.optimizer import ArmStats, Observation, PruningState, ZeusOptimizer, posterior

# -- Gaussian TS arithmetic ------------------------------------------------------------


def stats(rewards, window=0):
    s = ArmStats()
    for r in rewards:
        s = s.add(r, window)
    return s


def test_posterior_with_uninformative_prior_is_the_sample_mean():
    # rewards -10, -12: mean -11, population variance 1 -> reward precision 1;
    # prior precision 0 -> posterior precision 2 * 1 = 2, mean -11.
    mean, prec = posterior(stats([-10.0, -12.0]), prior_mean=0.0, prior_precision=0.0)
    assert mean == pytest.approx(-11.0)
    assert prec == pytest.approx(2.0)


def test_posterior_with_informative_prior_by_hand():
    # rewards -1, -3, -5: mean -3, var = (4 + 0 + 4) / 3 = 8/3 -> reward precision 3/8.
    # posterior precision = 0.5 + 3 * 3/8 = 1.625
    # posterior mean = (0.5 * -2 + 3/8 * (-9)) / 1.625 = (-1 - 3.375) / 1.625
    mean, prec = posterior(stats([-1.0, -3.0, -5.0]), prior_mean=-2.0, prior_precision=0.5)
    assert prec == pytest.approx(1.625)
    assert mean == pytest.approx(-4.375 / 1.625)


def test_single_observation_collapses_to_it():
    mean, prec = posterior(stats([-7.5]), 0.0, 0.0)
    assert mean == -7.5 and math.isinf(prec)


def test_window_keeps_only_recent_rewards():
    s = stats([-100.0, -1.0, -3.0], window=2)
    assert s.count == 2
    mean, prec = posterior(s, 0.0, 0.0)
    assert mean == pytest.approx(-2.0) and prec == pytest.approx(2.0)  # var 1, n 2


def test_welford_matches_numpy():
    xs = [-3.2, -1.1, -8.4, -2.2, -5.5]
    n, mean, var = stats(xs).moments()
    assert n == 5 and mean == pytest.approx(np.mean(xs)) and var == pytest.approx(np.var(xs))


# -- pruning ------------------------------------------------------------------------

BS = (8, 16, 32, 64, 128)


def run_pruning(outcomes, default=32, rounds=2):
    """outcomes: batch size -> (cost, reached). Returns the explored order and final state."""
    s = PruningState.begin(BS, default, rounds)
    order = []
    while not s.done:
        b = s.expecting
        order.append(b)
        cost, reached = outcomes[b]
        s = s.observe(b, cost, reached)
    return order, s


# Table of (batch size, cost, reached).
TABLE = {8: (9.0, True), 16: (6.0, True), 32: (5.0, True), 64: (4.0, True), 128: (7.0, False)}


def test_pruning_goes_down_then_up_and_second_round_starts_at_cheapest():
    order, s = run_pruning(TABLE)
    # Round 1: 32 down to 8, then up: 64, 128 (fails, ends direction).
    # Round 2 starts at the cheapest converged (64) over {8,16,32,64}: down 64..8, no up.
    assert order == [32, 16, 8, 64, 128, 64, 32, 16, 8]
    assert s.candidates == (8, 16, 32, 64)


def test_failure_ends_the_downward_direction():
    table = dict(TABLE)
    table[16] = (6.0, False)
    order, s = run_pruning(table)
    # Round 1: 32, 16 (fails: 8 skipped), up 64, 128 (fails). Survivors {32, 64}; round 2 from 64: 64, 32.
    assert order == [32, 16, 64, 128, 64, 32]
    assert s.candidates == (32, 64)


def test_default_at_the_top_has_no_upward_direction():
    order, _ = run_pruning(TABLE, default=128, rounds=1)
    table = dict(TABLE)
    assert order == [128]  # fails at once; nothing above it
    order, s = run_pruning({**table, 128: (3.0, True)}, default=128, rounds=1)
    assert order == [128, 64, 32, 16, 8] and s.candidates == BS


def test_wrong_batch_size_does_not_advance():
    s = PruningState.begin(BS, 32, 2)
    assert s.observe(64, 1.0, True) == s


# -- the optimizer ------------------------------------------------------------------


def simulate(opt, costs, n=30, noise_seed=0):
    rng = np.random.default_rng(noise_seed)
    state = opt.initial_state()
    picks = []
    for _ in range(n):
        d = opt.decide(state)
        picks.append(d.batch_size)
        c, reached = costs[d.batch_size]
        state = opt.observe(state, Observation(d.batch_size, c * (1 + 0.05 * rng.random()), reached))
    return picks, state


def test_thompson_stage_follows_pruning_and_prefers_the_cheapest():
    opt = ZeusOptimizer(BS, 32, seed=3)
    picks, state = simulate(opt, TABLE, n=40)
    assert picks[:9] == [32, 16, 8, 64, 128, 64, 32, 16, 8]
    assert opt.decide(state).stage == "thompson"
    # 64 is clearly cheapest (4 vs 5+): TS must settle on it.
    assert picks[-10:].count(64) >= 8


def test_same_seed_and_observations_give_same_choices():
    a, _ = simulate(ZeusOptimizer(BS, 32, seed=11), TABLE, n=40)
    b, _ = simulate(ZeusOptimizer(BS, 32, seed=11), TABLE, n=40)
    assert a == b


def test_decide_is_pure_and_fold_equals_incremental():
    opt = ZeusOptimizer(BS, 32, seed=5)
    _, state = simulate(opt, TABLE, n=25)
    assert opt.decide(state) == opt.decide(state)
    obs = [Observation(b, c, r) for b, (c, r) in [(32, (5.0, True)), (16, (6.0, True)), (8, (9.0, False))]]
    inc = opt.initial_state()
    for o in obs:
        inc = opt.observe(inc, o)
    assert opt.fold(obs) == inc


def test_explores_arms_with_too_few_observations_when_no_pruning():
    opt = ZeusOptimizer((16, 32, 64), 32, seed=1, pruning_rounds=0, num_explorations=2)
    picks, _ = simulate(opt, {16: (3, True), 32: (2, True), 64: (4, True)}, n=6)
    assert sorted(picks) == [16, 16, 32, 32, 64, 64]


def test_rejects_unknown_batch_size():
    opt = ZeusOptimizer(BS, 32)
    with pytest.raises(ValueError, match="not one of"):
        opt.observe(opt.initial_state(), Observation(3, 1.0, True))
    with pytest.raises(ValueError, match="not in"):
        ZeusOptimizer(BS, 48)


# -- cost arithmetic ------------------------------------------------------------------


def test_zeus_cost_and_threshold():
    # 0.3 * 1000 J + 0.7 * 250 W * 10 s = 300 + 1750
    assert zeus_cost(1000.0, 10.0, 0.3, 250.0) == pytest.approx(2050.0)
    assert zeus_cost(1000.0, 10.0, 1.0, 250.0) == pytest.approx(1000.0)
    assert cost_threshold(2.0, 2050.0) == pytest.approx(4100.0)
    assert math.isinf(cost_threshold(None, 2050.0))
    assert math.isinf(cost_threshold(2.0, math.inf))
    with pytest.raises(ValueError):
        zeus_cost(1.0, 1.0, 1.5, 1.0)


def test_learning_rate_scaling():
    assert scale_learning_rate(0.1, 64, 256, "sqrt") == pytest.approx(0.2)
    assert scale_learning_rate(0.1, 64, 256, "linear") == pytest.approx(0.4)
    assert scale_learning_rate(0.1, 64, 256, "none") == pytest.approx(0.1)
