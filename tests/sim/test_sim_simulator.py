"""The trace executor, baselines and simulation, checked by hand on a tiny trace."""

from __future__ import annotations

import math

import pytest

from tests.sim_helpers import write_tiny_traces
from zeus_run.engine.core import Engine, TrialRequest
from zeus_run.engine.position import observation_of
from zeus_run.optimizer import Decision, ZeusOptimizer
from zeus_run.sim import (
    JOBS,
    TraceExecutor,
    default_baseline,
    informed_start,
    job_table,
    load_traces,
    oracle_baseline,
    simulate,
)
from zeus_run.spec import OptimizerSettings


@pytest.fixture
def table(tmp_path):
    d = write_tiny_traces(tmp_path / "traces")
    return job_table(load_traces(d / "summary_train.csv", d / "summary_power_tiny.csv"), JOBS["squad"])


def request(bs: int, threshold: float = math.inf, trial: int = 0) -> TrialRequest:
    return TrialRequest(1, 1, trial, trial, Decision(bs, "pruning"), threshold)


def test_default_and_oracle_by_hand(table):
    d = default_baseline(table, 0.5)
    # bs 16 at 200 W; mean target epoch over the runs that reached = 5; epoch: 6 s at 150 W.
    assert (d.batch_size, d.power_limit) == (16, 200.0)
    assert d.energy == pytest.approx(5 * 6 * 150)
    assert d.time == pytest.approx(30)
    assert d.cost == pytest.approx(0.5 * 4500 + 0.5 * 200 * 30)  # 5250
    o = oracle_baseline(table, 0.5)
    # Only bs 8 reached in every run; mean 5 epochs; 100 W: 725 J/epoch beats 760 J at 200 W.
    assert (o.batch_size, o.power_limit) == (8, 100.0)
    assert o.cost == pytest.approx(5 * 725)


def test_first_trial_pays_profiling_epoch(table):
    ex = TraceExecutor(table, 0.5, seed=3)
    first = ex(request(8))
    assert first.power_limit == 100.0
    n = first.epochs
    assert first.reached and n in (4, 6)
    # Epoch 1: mean over limits (energy (450 + 720) / 2, time (5 + 4) / 2); the rest at 100 W.
    assert first.energy == pytest.approx(585 + (n - 1) * 450)
    assert first.time == pytest.approx(4.5 + (n - 1) * 5)
    second = ex(request(8, trial=1))
    assert second.energy == pytest.approx(second.epochs * 450)
    assert second.time == pytest.approx(second.epochs * 5)
    assert second.cost == pytest.approx(second.epochs * 725)


def test_informed_start_by_hand(table):
    # Recurrence 1, b0 = 16, profiled: epoch 1 at the mean over limits (energy (800 + 900) / 2, time
    # (10 + 6) / 2), its other 4 of 5 mean epochs at 200 W (900 J, 6 s each): 0.5 * 4450 + 0.5 * 200 * 32.
    b0 = 0.5 * 4450 + 0.5 * 200 * 32
    # Recurrence 2, the Oracle's bs 8, profiled: epoch 1 (450 + 720) / 2 J, 4.5 s; 4 epochs at 100 W.
    oracle_first = 0.5 * (585 + 4 * 450) + 0.5 * 200 * (4.5 + 4 * 5)
    assert informed_start(table, 0.5, 1) == pytest.approx(b0)
    assert informed_start(table, 0.5, 2) == pytest.approx(b0 + oracle_first)
    assert informed_start(table, 0.5, 8) == pytest.approx(b0 + oracle_first + 6 * 5 * 725)
    assert informed_start(table, 0.5) == informed_start(table, 0.5, table.horizon)


def test_informed_start_is_below_every_simulated_run_of_the_oracle_path(table):
    """A policy that knew the Oracle still pays b0's first run and two profiles: the floor is above
    the Oracle, and its excess shrinks as the horizon grows."""
    oracle = oracle_baseline(table, 0.5).cost
    excess = [informed_start(table, 0.5, n) / (n * oracle) - 1.0 for n in (2, 8, 32)]
    assert all(e > 0 for e in excess)
    assert excess == sorted(excess, reverse=True)


def _profiled(table, seed=0):
    ex = TraceExecutor(table, 0.5, seed=seed)
    ex.power_limit(table.index(8))
    return ex


def test_early_stop_cuts_at_last_affordable_epoch(table):
    ex = _profiled(table)
    # floor(2200 / 725) = 3 epochs: both paths (4 and 6) are cut.
    r = ex(request(8, threshold=2200))
    assert (r.epochs, r.reached, r.stop_reason) == (3, False, "cost_threshold")
    assert r.cost == pytest.approx(3 * 725)
    # floor(4000 / 725) = 5: the 4-epoch path reaches, the 6-epoch path is cut at 5.
    seen = {(x.epochs, x.reached) for x in (ex(request(8, threshold=4000, trial=i)) for i in range(40))}
    assert seen == {(4, True), (5, False)}


def test_trial_that_cannot_afford_one_epoch_is_skipped(table):
    r = _profiled(table)(request(8, threshold=700))
    assert (r.stop_reason, r.epochs, r.reached, r.spent_cost) == ("skipped", 0, False, 0.0)
    assert observation_of(r).cost == pytest.approx(100 * 700)


def test_path_sampling_is_deterministic_by_seed(table):
    def draws(seed):
        ex = TraceExecutor(table, 0.5, seed)
        return [ex.sample_path(0) for _ in range(50)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)
    assert simulate(table, seed=1).records == simulate(table, seed=1).records


class SpyOptimizer(ZeusOptimizer):
    """Records every observation the engine hands the optimizer."""

    seen: list

    def observe(self, state, obs):
        self.seen.append(obs)
        return super().observe(state, obs)


def test_optimizer_sees_only_observed_outcomes(table):
    opt = SpyOptimizer(table.batch_sizes, table.default_batch_size, seed=2)
    opt.seen = []
    ex = TraceExecutor(table, 0.5, seed=2)
    records = Engine(opt, 12, 20, 1.2).run([], ex)
    assert opt.seen == [observation_of(r) for r in records]
    for r, obs in zip(records, opt.seen, strict=False):
        assert set(vars(obs)) == {
            "batch_size",
            "cost",
            "reached",
            "probe",
            "epochs",
            "slowdown",
            "overhead",
            "power",
            "warm",
            "estimated",
        }
        assert not obs.warm  # a cold start: every observation is this run's
        assert obs.estimated == (1.0 if r.estimated else 0.0)  # the trace's energy is its measurement, or said not
        assert 0.0 < obs.power <= 1.0  # the trace's mean power over the limit the trial ran at
        assert obs.slowdown == 1.0  # the paper's early stop checks no pace
        # A first run's sweep is priced as the launcher prices it; no later run sweeps.
        assert obs.overhead == (r.profile_overhead or 0.0)
        assert (r.profile_overhead is not None) == (r is next(x for x in records if x.batch_size == r.batch_size))
        assert obs.epochs == r.epochs  # the epochs it ran: its pace is cost / epochs
        assert obs.probe  # serial: pruning takes any result of the batch size it expects
        if r.stop_reason == "skipped":
            continue
        # The cost told is what the epochs actually run cost, never the full path's.
        assert obs.cost == pytest.approx(0.5 * r.energy + 0.5 * 200 * r.time)
        assert obs.reached == (r.stop_reason == "target_reached")
    assert any(r.stop_reason in ("cost_threshold", "max_epochs") for r in records)


def test_simulate_totals_and_policies(table):
    res = simulate(table, seed=1)
    assert res.horizon == 8
    assert sum(r.reached for r in res.records) == 8
    assert res.cost == pytest.approx(sum(r.spent_cost for r in res.records))
    assert res.regret == pytest.approx(res.cost / (8 * 5 * 725) - 1)
    plus = simulate(table, seed=1, settings=OptimizerSettings(policy="zeus-plus"))
    assert plus.policy == "zeus-plus" and len(plus.records) >= 8


WALK_TRAIN = """dataset,network,batch_size,optimizer,learning_rate,run,target_metric,target_epoch
walk,net,8,sgd,0.1,1,1.0,
walk,net,16,sgd,0.1,1,1.0,4
walk,net,32,sgd,0.1,1,1.0,6
walk,net,64,sgd,0.1,1,1.0,8
"""
WALK_POWER = """dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power
walk,net,8,sgd,100,1,100
walk,net,16,sgd,100,1,100
walk,net,32,sgd,100,1,100
walk,net,64,sgd,100,1,100
"""


def test_guided_walk_by_hand(tmp_path):
    """b0 64, the Oracle 16 two steps down, and 8 beyond it never converges: the walk runs 64, 32, then 8 once
    (cut at beta x the best run so far, or at max_epochs, and its recurrence runs again), then 16."""
    from zeus_run.sim import TraceJob, guided_walk

    (tmp_path / "summary_train.csv").write_text(WALK_TRAIN)
    (tmp_path / "summary_power_one.csv").write_text(WALK_POWER)
    traces = load_traces(tmp_path / "summary_train.csv", tmp_path / "summary_power_one.csv")
    table = job_table(traces, TraceJob("walk", "walk", "net", "sgd", 1.0, 10, 64))
    assert table.max_power == 100 and oracle_baseline(table, 0.5).batch_size == 16
    # One limit: every epoch costs 0.5 * 100 W * 1 s + 0.5 * 100 W * 1 s = 100 J, the swept first one too.
    assert guided_walk(table, 0.5, 1) == pytest.approx(800)
    assert guided_walk(table, 0.5, 2) == pytest.approx(800 + 600)
    # 8 never converges: at beta 2 its cost never passes 1200 within max_epochs (10 epochs, 1000 J).
    assert guided_walk(table, 0.5, 5) == pytest.approx(800 + 600 + 1000 + 3 * 400)
    # At beta 1.2 it is cut once it passes 720: after 8 epochs.
    assert guided_walk(table, 0.5, 5, beta=1.2) == pytest.approx(800 + 600 + 800 + 3 * 400)
    # The informed start goes to 16 at once: the walk pays 32's run and 8's over it.
    assert informed_start(table, 0.5, 5) == pytest.approx(800 + 4 * 400)
    # With b0 the Oracle's, the walk sees both neighbours: 8 (cut after 9 epochs, 900 > 2 x 400), then 32.
    at_oracle = job_table(traces, TraceJob("walk", "walk", "net", "sgd", 1.0, 10, 16))
    assert guided_walk(at_oracle, 0.5, 4) == pytest.approx(400 + 900 + 600 + 400 + 400)


def test_guided_walk_is_the_informed_start_where_b0_is_next_to_the_oracle_at_an_end(table):
    """On the tiny trace b0 (16) is next to the Oracle (8), at an end: the walk is the informed start."""
    from zeus_run.sim import guided_walk

    for n in (1, 2, 8):
        assert guided_walk(table, 0.5, n) == pytest.approx(informed_start(table, 0.5, n))
