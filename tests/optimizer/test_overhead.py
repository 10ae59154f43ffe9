"""``zeus-voi`` revision 9: a batch size is learnt without its first run's power-limit sweep, and a probe pays one."""

from __future__ import annotations

import dataclasses

import pytest

from tests.optimizer.revisions import voi
from zeus_run.engine.replay import audit
from zeus_run.optimizer import Observation
from zeus_run.optimizer.legacy.overhead import overhead_share
from zeus_run.sim import find_job, job_table, load_traces, simulate
from zeus_run.spec import OptimizerSettings

BS = (16, 32, 64, 128)


def test_the_sweep_is_left_out_of_what_is_learnt_but_not_of_what_was_spent():
    o = voi(BS, 128, seed=1, horizon=24, revision=9)
    state = o.observe(o.initial_state(), Observation(128, 118.0, True, epochs=3, overhead=18.0))
    est, _ = o.posterior(state)
    assert est[128].mean == pytest.approx(100.0)
    assert state.spent == pytest.approx(118.0)  # the budget counts what was paid
    assert state.first[128].cost == pytest.approx(100.0)  # its pace (cost per epoch) is the steady one
    assert overhead_share(o, state, 64) == pytest.approx(0.18)
    eight = voi(BS, 128, seed=1, horizon=24, revision=8)
    before = eight.observe(eight.initial_state(), Observation(128, 118.0, True, epochs=3, overhead=18.0))
    assert eight.posterior(before)[0][128].mean == pytest.approx(118.0)  # revision 8 learns what was paid


@pytest.mark.parametrize(("horizon", "rise"), [(10, 1.02), (16, 1.05), (24, 1.08)])
def test_a_probe_is_charged_the_sweep_its_nearest_batch_size_paid(horizon, rise):
    """b0 (128) and 64 each paid 18% of their steady cost for their sweeps, and 64 costs a little more: 32
    would pay a sweep too. Where its expected saving only just exceeds its cost, that charge decides."""
    o = voi(BS, 128, seed=1, horizon=horizon, revision=9)
    state = o.initial_state()
    for b, steady in ((128, 100.0), (64, 100.0 * rise)):
        state = o.observe(state, Observation(b, steady * 1.18, True, epochs=3, overhead=steady * 0.18))
    assert overhead_share(o, state, 32) == pytest.approx(0.18)  # 64's, the nearest
    assert o.decide(state).stage == "thompson"
    free = dataclasses.replace(state, overheads={})  # the same costs, as if no sweep were to come
    assert (o.decide(free).batch_size, o.decide(free).stage) == (32, "pruning")


def _sentiment140_a40(traces_dir):
    traces = load_traces(traces_dir / "summary_train.csv", traces_dir / "summary_power_a40.csv")
    return job_table(traces, find_job("sentiment140"))


def test_a_gentle_rise_is_no_longer_flattened_by_the_sweep(traces_dir):
    """sentiment140 on the A40: b0 (128) is the Oracle's batch size and every run takes 3 epochs; each first run
    pays 15-18% for its sweep. Revision 8 saw first runs of 1.18, 1.25 and 1.30 and probed 16 (1.77) on every seed;
    revision 9 sees 1.00, 1.09 and 1.16 and stops, costing less."""
    table = _sentiment140_a40(traces_dir)
    for seed in (1, 2, 3):
        runs = {
            rev: simulate(table, seed=seed, horizon=24, settings=OptimizerSettings(revision=rev), baselines=False)
            for rev in (8, 9)
        }
        assert 16 in {r.batch_size for r in runs[8].records}
        assert 16 not in {r.batch_size for r in runs[9].records}
        assert runs[9].cost < runs[8].cost
        assert all((r.profile_overhead is not None) == (r.message is not None) for r in runs[9].records)


def test_a_run_recorded_under_revision_8_replays_exactly_and_not_under_revision_9(traces_dir):
    r = simulate(
        _sentiment140_a40(traces_dir), seed=1, horizon=24, settings=OptimizerSettings(revision=8), baselines=False
    )
    assert r.knobs is not None
    assert audit(r.records, r.knobs).divergence is None
    newer = dataclasses.replace(r.knobs, optimizer=OptimizerSettings(revision=9))
    assert audit(r.records, newer).divergence is not None
