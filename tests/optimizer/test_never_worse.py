"""``zeus-voi`` revision 4: probes that cannot converge are stopped by their curve; exploration stays within budget."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.optimizer.revisions import voi
from zeus_run.contract import StopReason
from zeus_run.optimizer import Observation, ZeusVOIOptimizer
from zeus_run.optimizer.early_stop import CURVE_WINDOW, cannot_reach, curve_min_epochs
from zeus_run.optimizer.voi.looks import second_look
from zeus_run.sim import find_job, job_table, load_traces, simulate
from zeus_run.spec import OptimizerSettings

#: cifar100 (target 0.6, max_epochs 100, b0 1024) on two batch sizes: b0 reaches the target in
#: 20 epochs and is the Oracle; 512 runs its epochs a little cheaper and never reaches it.
TRAIN = "dataset,network,batch_size,optimizer,learning_rate,run,target_metric,target_epoch\n" + "".join(
    f"cifar100,shufflenetv2,{bs},adadelta,1.0,{run},0.6,{epoch}\n"
    for bs, epoch in ((1024, 20), (512, ""))
    for run in (1, 2, 3, 4)
)
POWER = """dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power
cifar100,shufflenetv2,1024,adadelta,100,10,90
cifar100,shufflenetv2,1024,adadelta,200,8,180
cifar100,shufflenetv2,512,adadelta,100,9,90
cifar100,shufflenetv2,512,adadelta,200,7,180
"""


@pytest.fixture
def b0_is_oracle(tmp_path: Path):
    (tmp_path / "summary_train.csv").write_text(TRAIN)
    (tmp_path / "summary_power_toy.csv").write_text(POWER)
    traces = load_traces(tmp_path / "summary_train.csv", tmp_path / "summary_power_toy.csv")
    return job_table(traces, find_job("cifar100"))


def run(table, revision: int, seed: int, horizon: int = 24):
    settings = OptimizerSettings.for_policy("zeus-voi", revision=revision)
    return simulate(table, eta=0.5, beta=2.0, seed=seed, horizon=horizon, settings=settings, baselines=False)


# -- the learning-curve rule ----------------------------------------------------------------------


@given(
    max_epochs=st.integers(3, 200),
    plateau=st.floats(0.05, 0.95),
    rise=st.integers(0, 40),
    higher=st.booleans(),
)
def test_a_curve_that_has_stopped_short_of_the_target_is_stopped_soon(max_epochs, plateau, rise, higher):
    """A curve that rises for ``rise`` epochs, then stays flat below the target: stopped within a window of the flat."""
    target = 1.0
    curve = [plateau * min(1.0, (e + 1) / (rise + 1)) for e in range(max_epochs)]
    if not higher:
        curve, target = [2.0 - m for m in curve], 2.0 - target
    stops = [
        n for n in range(1, max_epochs + 1) if cannot_reach(curve[:n], target, max_epochs, higher_is_better=higher)
    ]
    latest = max(curve_min_epochs(max_epochs), rise + 1 + CURVE_WINDOW)
    if latest < max_epochs:
        assert stops and stops[0] <= latest
    assert all(n >= curve_min_epochs(max_epochs) for n in stops)


@given(max_epochs=st.integers(3, 200), share=st.floats(0.01, 1.0))
def test_a_straight_curve_that_reaches_the_target_in_time_is_never_stopped(max_epochs, share):
    epochs_to_target = max(1, math.ceil(share * max_epochs))
    curve = [min(1.0, (e + 1) / epochs_to_target) for e in range(max_epochs)]
    assert not any(cannot_reach(curve[:n], 1.0, max_epochs) for n in range(1, max_epochs + 1))


def test_the_threshold_bounds_the_epochs_left():
    """A curve that would reach the target by max_epochs, but not within the epochs its threshold affords."""
    curve = [0.1, 0.2, 0.3, 0.4]  # 0.1 per epoch: 6 more epochs to 1.0
    assert not cannot_reach(curve, 1.0, 20, cost=4.0, threshold=math.inf)
    assert cannot_reach(curve, 1.0, 20, cost=4.0, threshold=8.0)  # 4 more epochs affordable


@pytest.mark.parametrize("seed", range(1, 11))
def test_a_probe_whose_curve_cannot_reach_the_target_is_stopped_before_beta_times_the_best(b0_is_oracle, seed):
    best = min(r.cost for r in run(b0_is_oracle, 4, seed).records if r.reached)
    probes = [r for r in run(b0_is_oracle, 4, seed).records if r.batch_size == 512]
    for probe in probes:
        assert probe.stop_reason == StopReason.NO_PROGRESS
        assert probe.epochs == curve_min_epochs(100)
        assert probe.cost < 2.0 * best
    # revision 3 runs the same probe until its cost reaches the threshold
    old = [r for r in run(b0_is_oracle, 3, seed).records if r.batch_size == 512]
    assert old and all(r.stop_reason == StopReason.COST_THRESHOLD for r in old)


# -- the exploration budget --------------------------------------------------------------------------


@pytest.mark.parametrize("horizon", [10, 24, 50])
def test_exploration_stays_within_budget_where_b0_is_the_oracle(b0_is_oracle, horizon):
    bound = 1.0 + ZeusVOIOptimizer.BUDGET
    for seed in range(1, 21):
        r = run(b0_is_oracle, 4, seed, horizon)
        assert r.cost <= bound * r.default.cost * horizon, (seed, r.cost / (r.default.cost * horizon))


def test_the_budget_refuses_a_probe_the_job_cannot_pay_for():
    """Two recurrences of b0 at 100 J: a job of 10 recurrences may exceed the Default by 100 J."""
    opt = voi([8, 16, 32], 16, seed=1, horizon=10)
    state = opt.fold([Observation(16, 100.0, True, epochs=5), Observation(16, 100.0, True, epochs=5)])
    est, _ = opt.posterior(state)
    assert opt.within_budget(state, est, probe=100.0, converge=0.75)  # expected excess 25 J
    assert not opt.within_budget(state, est, probe=200.0, converge=0.75)  # 125 J
    assert voi([8, 16, 32], 16, horizon=10, revision=3).within_budget(state, est, 1e9, 0.0)


def test_the_chance_of_converging_counts_the_batch_sizes_tried():
    opt = voi([8, 16, 32], 16, seed=1, horizon=10)
    state = opt.fold([Observation(16, 100.0, True, epochs=5)])
    assert opt.converge_chance(state) == pytest.approx(0.75)
    state = opt.observe(state, Observation(32, 150.0, False, epochs=3))
    assert opt.converge_chance(state) == pytest.approx(1.5 / 3.0)
    assert voi([8, 16, 32], 16, revision=3).converge_chance(state) == 1.0


# -- a second look at a slow first run below b0 -------------------------------------------------------


def test_a_probe_below_b0_whose_first_run_ran_slower_than_any_batch_size_can_is_run_again():
    """b0 192 runs its epochs at 10 J; 128 can at worst take 192/128 x 10 = 15 J; it took 30 J (a slow recurrence)."""
    opt = voi([64, 128, 192], 192, seed=1, horizon=50)
    b0 = [Observation(192, 100.0, True, epochs=10)] * 2
    slow = opt.fold([*b0, Observation(128, 300.0, True, epochs=10)])
    decision = opt.decide(slow)
    assert (decision.batch_size, decision.stage) == (128, "pruning") and "second look" in decision.detail
    # its second run is at the usual pace: the first one is taken at that pace, and 128 leads
    again = opt.observe(slow, Observation(128, 90.0, True, epochs=10))
    est, _ = opt.posterior(again)
    assert est[128].mean == pytest.approx(90.0) and opt.leader(again) == 128
    # a first run within the bound (18 J an epoch < 1.3 x 15 J) gets no second look
    quiet = opt.fold([*b0, Observation(128, 180.0, True, epochs=10)])
    assert second_look(opt, quiet, opt.posterior(quiet)[0]) is None
    # revision 3 never looks again
    old = voi([64, 128, 192], 192, seed=1, horizon=50, revision=3)
    assert "second look" not in old.decide(old.fold([*b0, Observation(128, 300.0, True, epochs=10)])).detail
