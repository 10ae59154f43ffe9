"""``zeus-voi`` revision 7: a walk down a sure steep descent strides two batch sizes."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.optimizer.revisions import voi
from zeus_run.optimizer import Observation, ZeusVOIOptimizer
from zeus_run.optimizer.legacy.stride import candidates, predict_span
from zeus_run.sim import find_job, job_table, load_traces, simulate
from zeus_run.spec import OptimizerSettings

BS = (16, 32, 64, 128, 256, 512, 1024)
B0 = 1024


def opt(revision: int, horizon: int | None = 24) -> ZeusVOIOptimizer:
    return voi(BS, B0, seed=1, horizon=horizon, revision=revision)


def fold(o: ZeusVOIOptimizer, costs: list[tuple[int, float]]):
    """Converged runs of these costs, at one pace (cost per epoch): the epochs carry the cost."""
    state = o.initial_state()
    for b, c in costs:
        state = o.observe(state, Observation(b, c, True, epochs=round(10 * c)))
    return state


def test_a_sure_steep_descent_strides_two_batch_sizes():
    """b0 costs 4, 512 costs 2 (log step -0.69): revision 7 probes 128, revision 6 the next one, 256."""
    walked = [(1024, 4.0), (512, 2.0)]
    r6, r7 = opt(6), opt(7)
    assert r6.decide(fold(r6, walked)).batch_size == 256
    decision = r7.decide(fold(r7, walked))
    assert decision.batch_size == 128
    assert "two steps" in decision.detail


@pytest.mark.parametrize("ratio", [0.74, 0.85, 1.0, 1.1, 1.3])
def test_a_shallow_rising_or_uncertain_trend_walks_as_revision_6(ratio):
    """A step of -0.3 in log cost (0.74x) is steep, but two single runs of 10% noise do not make it sure."""
    walked = [(1024, 4.0), (512, 4.0 * ratio)]
    r6, r7 = opt(6), opt(7)
    assert r7.decide(fold(r7, walked)) == r6.decide(fold(r6, walked))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-0.2, 0.6), min_size=len(BS) - 1, max_size=len(BS) - 1),
    st.sampled_from([10, 24, 100, None]),
)
def test_without_a_steep_fall_revision_7_decides_exactly_as_revision_6(rises, horizon):
    """A cost curve that falls by at most 0.2 in log cost per step away from b0 (or rises): the same decisions."""
    log_cost = {B0: 0.0}
    for i, rise in zip(range(len(BS) - 2, -1, -1), rises, strict=False):
        log_cost[BS[i]] = log_cost[BS[i + 1]] + rise
    r6, r7 = opt(6, horizon), opt(7, horizon)
    s6, s7 = r6.initial_state(), r7.initial_state()
    for _ in range(10):
        d6, d7 = r6.decide(s6), r7.decide(s7)
        assert d6 == d7
        cost = 4.0 * math.exp(log_cost[d6.batch_size])
        obs = Observation(d6.batch_size, cost, True, epochs=round(10 * cost))
        s6, s7 = r6.observe(s6, obs), r7.observe(s7, obs)


def test_a_stride_past_the_best_is_checked_back():
    """128 was reached by a stride from 512 (256 skipped) and 32 by another (64 skipped): 32 rose.

    Seen from 128 the descent goes on into 64; a straight line from 128 to 32 would put 64 above 128.
    """
    walked = [(1024, 4.0), (512, 2.0), (128, 1.0), (32, 1.4)]
    o = opt(7)
    state = fold(o, walked)
    est, cv2 = o.posterior(state)
    gaps = {b: prior for b, why, prior in candidates(o, state, est, cv2) if "skipped" in why}
    assert set(gaps) == {64, 256}
    assert gaps[64][0] < gaps[256][0]  # the gap below the leader is predicted cheaper than the one above it
    assert o.decide(state).batch_size == 64


def test_a_gap_next_to_a_cliff_is_predicted_from_the_descent():
    """b0 = 128 of (16, 32, 64, 128, 256): 64 fell steeply (log -0.69), the stride to 16 landed on 4x its cost.

    The cliff has no trend behind it and says nothing of the slope into the gap: the gap is predicted as the
    next step of the descent (what revision 6 would have probed), not halfway up to the cliff.
    """
    o = voi((16, 32, 64, 128, 256), 128, seed=1, horizon=24, revision=7)
    state = fold(o, [(128, 4.0), (64, 2.0), (16, 8.0)])
    est, cv2 = o.posterior(state)
    gaps = {b: prior for b, why, prior in candidates(o, state, est, cv2) if "skipped" in why}
    walk = predict_span(o, est, 2, -1, cv2)
    assert gaps[32] == pytest.approx(walk[:2])
    assert o.decide(state).batch_size == 32


def test_revision_7_is_a_pure_function_of_the_observations():
    walked = [(1024, 4.0), (512, 2.0), (128, 1.0), (32, 1.4), (64, 0.9), (64, 0.95)]
    a, b = opt(7), opt(7)
    assert a.decide(fold(a, walked)) == b.decide(fold(b, walked))


# -- simulated jobs --------------------------------------------------------------------------------

#: Cost of each batch size (relative), for toy jobs on cifar100's settings: the epochs to the
#: target carry the cost (a smaller batch runs an epoch a little slower, as on real GPUs).
JOBS = {
    "steep": {16: 3.0, 32: 1.5, 64: 1.0, 128: 1.1, 256: 1.6, 512: 2.5, 1024: 4.0},
    "rise_then_fall": {64: 0.7, 128: 0.5, 256: 0.6, 512: 1.12, 1024: 1.0},
    "b0_best": {128: 1.3, 256: 1.15, 512: 1.06, 1024: 1.0},
}


def toy(tmp_path: Path, costs: dict[int, float]):
    train = "dataset,network,batch_size,optimizer,learning_rate,run,target_metric,target_epoch\n"
    power = "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n"
    for bs, c in costs.items():
        t = 10.0 * (1024 / bs) ** 0.1
        for run in (1, 2, 3, 4):
            epochs = max(1, round(200.0 * c / t) + run % 3 - 1)
            train += f"cifar100,shufflenetv2,{bs},adadelta,1.0,{run},0.6,{epochs}\n"
        for limit, slower, watts in ((100, 1.25, 90), (150, 1.05, 140), (200, 1.0, 180)):
            power += f"cifar100,shufflenetv2,{bs},adadelta,{limit},{t * slower:.4f},{watts}\n"
    (tmp_path / "summary_train.csv").write_text(train)
    (tmp_path / "summary_power_toy.csv").write_text(power)
    traces = load_traces(tmp_path / "summary_train.csv", tmp_path / "summary_power_toy.csv")
    return job_table(traces, find_job("cifar100"))


def cost_vs_default(table, revision: int, horizon: int | None, seeds=range(1001, 1021)) -> float:
    settings = OptimizerSettings.for_policy("zeus-voi", revision=revision)
    runs = [
        simulate(table, eta=0.5, beta=2.0, seed=s, horizon=horizon, settings=settings, baselines=False) for s in seeds
    ]
    return statistics.median(r.cost / r.default_cost for r in runs)


@pytest.mark.parametrize("horizon", [10, 24, None])
def test_a_steep_descent_costs_less_with_strides(tmp_path, horizon):
    """b0 four times the best, three steps away: strides reach it sooner, and an overshoot is checked back."""
    table = toy(tmp_path, JOBS["steep"])
    assert cost_vs_default(table, 7, horizon) < cost_vs_default(table, 6, horizon)


@pytest.mark.parametrize("job", ["rise_then_fall", "b0_best"])
@pytest.mark.parametrize("horizon", [10, 24])
def test_jobs_without_a_steep_descent_are_never_worse_than_the_default(tmp_path, job, horizon):
    table = toy(tmp_path, JOBS[job])
    assert cost_vs_default(table, 7, horizon) <= cost_vs_default(table, 6, horizon) + 1e-9 <= 1.0
