"""The default policy uses the horizon: exploration is valued over the recurrences left."""

from __future__ import annotations

import math

import pytest

from tests.optimizer.revisions import voi
from zeus_run.engine.core import Engine
from zeus_run.engine.replay import Knobs, audit
from zeus_run.optimizer import Observation, ZeusOptimizer, ZeusVOIOptimizer, make_optimizer
from zeus_run.records import TrialRecord
from zeus_run.spec import OptimizerSettings

BS = (8, 16, 32, 64)


def test_planning_horizon_counts_the_recurrences_left_discounted():
    open_ended = voi(BS, 16, horizon=None)
    state = open_ended.initial_state()
    assert open_ended.planning_horizon(state) == ZeusVOIOptimizer.PLANNING_HORIZON  # the discounted infinite sum
    opt = voi(BS, 16, horizon=24)
    g = ZeusVOIOptimizer.DISCOUNT
    assert opt.planning_horizon(state) == pytest.approx((1 - g**23) / (1 - g))  # 23 recurrences after the next
    later = opt.fold([Observation(16, 10.0, True)] * 20)
    assert opt.planning_horizon(later) == pytest.approx((1 - g**3) / (1 - g))
    assert opt.planning_horizon(opt.fold([Observation(16, 10.0, True)] * 30)) == 0.0
    # revision 1 (runs recorded before horizons) keeps the fixed horizon
    assert voi(BS, 16, horizon=24, revision=1).planning_horizon(later) == 100.0
    with pytest.raises(ValueError, match="horizon"):
        voi(BS, 16, horizon=0)


def test_a_probe_that_cannot_pay_off_in_the_recurrences_left_is_not_run():
    seen = [Observation(16, 100.0, True)]
    long = voi(BS, 16, horizon=200)
    short = voi(BS, 16, horizon=2)
    assert long.decide(long.fold(seen)).stage == "pruning"  # worth probing a neighbour
    assert short.decide(short.fold(seen)).stage == "exploit"  # one recurrence left: not worth it
    assert short.decide(short.fold(seen)).batch_size == 16


def test_the_paper_policy_ignores_the_horizon():
    a, b = ZeusOptimizer(BS, 16).with_horizon(2), ZeusOptimizer(BS, 16).with_horizon(None)
    obs = [Observation(16, 100.0, True), Observation(8, 120.0, True)]
    assert a.decide(a.fold(obs)) == b.decide(b.fold(obs))


def _machine(req) -> TrialRecord:
    bs = req.decision.batch_size
    cost = {8: 30.0, 16: 20.0, 32: 10.0, 64: 14.0}[bs]
    threshold = req.cost_threshold if math.isfinite(req.cost_threshold) else None
    return TrialRecord(
        "t",
        req.recurrence,
        req.attempt,
        req.trial,
        bs,
        req.decision.stage,
        3,
        cost / 100,
        cost,
        100.0,
        cost,
        True,
        "target_reached",
        detail=req.decision.detail,
        cost_threshold=threshold,
    )


def test_records_carry_the_horizon_so_raising_recurrences_later_still_audits():
    settings = OptimizerSettings()
    first = Engine(make_optimizer(settings, BS, 16, 1, horizon=2), 2, 20, 2.0).run([], _machine)
    assert {r.horizon for r in first} == {2} and [r.batch_size for r in first] == [16, 16]  # nothing to explore
    more = Engine(make_optimizer(settings, BS, 16, 1, horizon=40), 40, 20, 2.0).run(first, _machine)
    assert {r.horizon for r in more} == {40}
    history = [*first, *more]
    knobs = Knobs(BS, 16, 0.5, 2.0, 1, settings, 0.9, True, 10, 20, horizon=40)
    assert audit(history, knobs).divergence is None
    # Without the record's horizon, the first decisions would not re-derive.
    stripped = [TrialRecord(**{**r.__dict__, "horizon": None}) for r in history]
    assert audit(stripped, knobs).divergence is not None
