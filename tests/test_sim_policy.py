"""zeus-plus's cost-aware pruning, step by step (ratios 1.5)."""

from __future__ import annotations

import pytest

from zeus_run.optimizer import POLICIES, Observation, ZeusPlusOptimizer

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

    a = ArmStats().add(-10.0, 0).add(-12.0, 0)  # mean -11, var 1
    b = ArmStats().add(-20.0, 0).add(-20.0, 0)  # mean -20, var 0
    # pooled relative variance cv2 = (2*1 + 2*0) / (2*121 + 2*400) = 2/1042
    cv2 = 2 / 1042
    (ma, pa), (mb, pb) = shrunk_posteriors([a, b], prior_weight=2.0)
    assert ma == pytest.approx(-11.0) and mb == pytest.approx(-20.0)
    assert pa == pytest.approx(2 / ((2 * 1 + 2 * cv2 * 121) / 4))
    assert pb == pytest.approx(2 / ((2 * cv2 * 400) / 4))
    # Without pooling weight, an arm with identical costs is certain (Zeus's behaviour).
    (_, pa0), (_, pb0) = shrunk_posteriors([a, b], prior_weight=0.0)
    assert pa0 == pytest.approx(2.0) and pb0 == float("inf")
