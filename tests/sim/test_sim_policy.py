"""zeus-plus's cost-aware pruning, step by step (ratios 1.5)."""

from __future__ import annotations

import pytest

from zeus_run.optimizer import POLICIES, Observation, ZeusOptimizer, ZeusPlusOptimizer

BS = (8, 16, 32, 64, 128)


def run(opt, costs):
    """Feed the pruning its expected batch sizes with ``costs[bs]`` (None: failed); return the visits and state."""
    state, visited = opt.initial_state(), []
    while state.pruning.expecting is not None:
        bs = state.pruning.expecting
        visited.append(bs)
        cost = costs[bs]
        state = opt.observe(state, Observation(bs, cost if cost is not None else 1e9, cost is not None))
    return visited, state


def test_direction_stops_after_a_costly_batch_size_and_survivors_are_cheap():
    opt = ZeusPlusOptimizer(BS, 32, pruning_rounds=1)
    visited, state = run(opt, {8: 130.0, 16: 80.0, 32: 100.0, 64: 200.0, 128: 90.0})
    # Down: 32, 16, 8 (130 > 1.5 x 80 ends it); up: 64 (200 > 120 ends it); 128 never runs.
    assert visited == [32, 16, 8, 64]
    assert state.survivors == (16, 32)


def test_upward_direction_skipped_when_start_was_costly():
    opt = ZeusPlusOptimizer(BS, 32, pruning_rounds=1)
    visited, _ = run(opt, {8: None, 16: 100.0, 32: 200.0, 64: 50.0, 128: 50.0})
    assert visited == [32, 16, 8]


def test_faithful_zeus_still_selectable():
    assert {"zeus", "zeus-plus"} <= set(POLICIES)
    visited, _ = run(POLICIES["zeus"](BS, 32, pruning_rounds=1), {8: 130.0, 16: 80.0, 32: 100.0, 64: 200.0, 128: 90.0})
    assert visited == [32, 16, 8, 64, 128]


def test_shrunk_posteriors_by_hand():
    from zeus_run.optimizer import ArmStats
    from zeus_run.optimizer._zeus_plus import shrunk_posteriors

    a = ArmStats().add(-10.0, 0).add(-12.0, 0)  # mean -11, SS 2
    b = ArmStats().add(-20.0, 0).add(-20.0, 0)  # mean -20, SS 0
    # pooled relative variance: (2/121 + 0/400) / (1 + 1) = 1/121
    cv2 = 1 / 121
    (ma, pa), (mb, pb) = shrunk_posteriors([a, b], prior_weight=2.0)
    assert ma == pytest.approx(-11.0) and mb == pytest.approx(-20.0)
    assert pa == pytest.approx(2 / ((2 + 2 * cv2 * 121) / 3))  # var 4/3
    assert pb == pytest.approx(2 / ((0 + 2 * cv2 * 400) / 3))
    # Without pooling weight, an arm with identical costs is certain (Zeus's behaviour).
    (_, pa0), (_, pb0) = shrunk_posteriors([a, b], prior_weight=0.0)
    assert pa0 == pytest.approx(2.0 / 2.0) and pb0 == float("inf")


def test_one_observation_gets_the_prior_relative_variance():
    from zeus_run.optimizer import ArmStats
    from zeus_run.optimizer._zeus_plus import shrunk_posteriors

    one = ArmStats().add(-10.0, 0)
    # No arm has two rewards: cv2 is the prior, 0.01, so var = 2 * 0.01 * 100 / (0 + 2) = 1.
    [(m, p)] = shrunk_posteriors([one], prior_weight=2.0, prior_cv2=0.01, prior_dof=1.0)
    assert m == -10.0 and p == pytest.approx(1.0)
    # With neither prior nor pooling, one reward is certain (and nothing divides by zero).
    [(_, p0)] = shrunk_posteriors([one], prior_weight=0.0)
    assert p0 == float("inf")


def test_zeus_plus_samples_after_one_round_and_one_observation():
    opt = ZeusPlusOptimizer(BS, 32, seed=3)
    assert (opt.pruning_rounds, opt.num_explorations) == (1, 1)
    _, state = run(opt, {8: 130.0, 16: 80.0, 32: 100.0, 64: 200.0, 128: 90.0})
    decisions = {opt.decide(state).stage for _ in range(3)}
    assert decisions == {"thompson"}
    assert opt.decide(state).batch_size in state.survivors


def test_policy_defaults_match_the_optimizers():
    from zeus_run.optimizer import make_optimizer
    from zeus_run.spec import POLICY_DEFAULTS, OptimizerSettings

    for name in ("zeus", "zeus-plus"):  # the pruning policies (zeus-voi's walk has no rounds)
        built = make_optimizer(OptimizerSettings.for_policy(name), BS, 32, 1)
        plain = POLICIES[name](BS, 32)
        assert isinstance(built, ZeusOptimizer) and isinstance(plain, ZeusOptimizer)
        assert (built.pruning_rounds, built.num_explorations) == (plain.pruning_rounds, plain.num_explorations)
        assert built.pruning_rounds == POLICY_DEFAULTS[name]["pruning_rounds"]
    assert set(POLICY_DEFAULTS) == set(POLICIES)
    assert OptimizerSettings.for_policy("zeus-plus", pruning_rounds=3).pruning_rounds == 3
    with pytest.raises(ValueError, match="unknown optimizer policy 'greedy'"):
        OptimizerSettings.for_policy("greedy")
