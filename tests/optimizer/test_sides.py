"""``zeus-voi`` revision 12: each side of b0 is explored on this job's evidence on that side, within its own share
of the budget (`zeus_run.optimizer.voi.sides`)."""

from __future__ import annotations

import math

import pytest

from tests.optimizer.revisions import voi
from zeus_run.optimizer import REVISION, Observation, make_optimizer
from zeus_run.optimizer.voi.sides import SIDE_BUDGET, excess
from zeus_run.spec import OptimizerSettings

#: Generated gen02 (scripts/gen_traces.py, seed 0) on g4: b0 128 needs 33 epochs of about 1,035 s; 64, at the
#: learning rate chosen for 128, is early-stopped at twice the best cost; 256 needs 26 epochs of 550 s.
BS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
B0 = 128
DEFAULT = Observation(B0, 33 * 1035.0, True, epochs=33)
FAILED_BELOW = Observation(64, 2 * 33 * 1035.0, False, epochs=0)


@pytest.mark.parametrize("horizon", [10, 24, None])
def test_a_failed_probe_below_b0_leaves_the_walk_upwards_open(horizon):
    seen = [DEFAULT, FAILED_BELOW]
    twelve = voi(BS, B0, horizon=horizon)
    decision = twelve.decide(twelve.fold(seen))
    assert decision.batch_size == 256 and decision.stage == "pruning"
    assert decision.detail.startswith("upwards")
    if horizon is not None:  # revision 10 ran b0 for the rest of the job: the failure below spent the one budget
        ten = voi(BS, B0, horizon=horizon, revision=10)
        assert ten.decide(ten.fold(seen)).batch_size == B0


def test_a_failure_lowers_the_chance_of_its_own_side_only():
    o = voi(BS, B0, horizon=24)
    state = o.fold([DEFAULT, FAILED_BELOW])
    assert o.converge_chance(state, 256) == pytest.approx(1.5 / 2.0)  # b0's evidence alone: 3/4
    assert o.converge_chance(state, 32 if 32 in BS else 64) == pytest.approx(1.5 / 3.0)
    assert voi(BS, B0, horizon=24, revision=10).converge_chance(state) == pytest.approx(1.5 / 3.0)


def test_a_side_that_failed_is_closed_by_its_own_failure_and_the_other_stays_open():
    o = voi(BS, B0, horizon=24)
    seen = [DEFAULT, Observation(256, 2 * 33 * 1035.0, False, epochs=0), DEFAULT]
    decision = o.decide(o.fold(seen))
    assert decision.batch_size == 64 and decision.detail.startswith("downwards")
    # and once both ends failed, nothing beyond them is probed: b0 runs
    decision = o.decide(o.fold([*seen, FAILED_BELOW, DEFAULT]))
    assert decision.batch_size == B0 and decision.stage == "exploit"


def test_a_side_is_charged_its_own_losses_and_funded_by_the_others_savings():
    o = voi(BS, B0, horizon=24)
    d = DEFAULT.cost
    state = o.fold([DEFAULT, FAILED_BELOW])
    assert excess(state, B0, d, -1) == pytest.approx(2 * d)  # the failed run, lost whole
    assert excess(state, B0, d, 1) == pytest.approx(0.0)  # not the other side's loss
    cheap = Observation(256, 0.5 * d, True, epochs=26)
    state = o.fold([DEFAULT, FAILED_BELOW, cheap])
    assert excess(state, B0, d, 1) == pytest.approx(-0.5 * d)
    assert excess(state, B0, d, -1) == pytest.approx(1.5 * d)  # the saving above funds the side below
    assert excess(state, B0, d, 0) == pytest.approx(1.5 * d)


def cost_where_b0_is_best(b: int) -> float:
    """A job whose default is the best: every doubling away costs 30% more, and every batch size converges."""
    return DEFAULT.cost * (1.0 + 0.3 * abs(math.log2(b / B0)))


@pytest.mark.parametrize("horizon", [3, 5, 10, 24, 60, 200])
def test_the_price_of_exploring_where_b0_is_best_stays_within_the_stated_bound(horizon):
    """docs/optimizer.md: the excess over the Default is at most, per side, ``SIDE_BUDGET x D x N`` plus what its
    last probe cost beyond the Default (the check is on the expected cost; the run may cost more)."""
    o = voi(BS, B0, horizon=horizon)
    seen: list[Observation] = []
    for _ in range(horizon):
        b = o.decide(o.fold(seen)).batch_size
        seen.append(Observation(b, cost_where_b0_is_best(b), True, epochs=33))
    d = DEFAULT.cost
    paid = sum(x.cost for x in seen)
    worst = {
        s: max((x.cost - d for x in seen if x.batch_size != B0 and (x.batch_size > B0) == (s > 0)), default=0.0)
        for s in (-1, 1)
    }
    bound = d * horizon + sum(SIDE_BUDGET * d * horizon + worst[s] for s in (-1, 1))
    assert paid <= bound + 1e-6, f"horizon {horizon}: paid {paid / (d * horizon):.3f}x the Default"
    assert paid / (d * horizon) <= 1.0 + 2 * SIDE_BUDGET + 2 * 0.3 / horizon + 1e-9


def test_revision_12_is_the_default_and_its_decisions_are_a_pure_function_of_the_observations():
    assert OptimizerSettings().revision == REVISION == 12
    seen = [DEFAULT, FAILED_BELOW, Observation(256, 26 * 550.0, True, epochs=26), DEFAULT]
    a = make_optimizer(OptimizerSettings(), BS, B0, seed=1, horizon=24)
    b = make_optimizer(OptimizerSettings(), BS, B0, seed=2, horizon=24)  # nothing is drawn: the seed changes nothing
    for n in range(len(seen) + 1):
        assert a.fold(seen[:n]) == b.fold(seen[:n])
        assert a.decide(a.fold(seen[:n])) == b.decide(b.fold(seen[:n]))
    # a run directory recorded under revision 10 replays under revision 10: its frozen copy decides as it did
    ten = make_optimizer(OptimizerSettings(revision=10), BS, B0, seed=1, horizon=24)
    assert type(ten).__module__ == "zeus_run.optimizer.legacy.rev10.policy"
    assert ten.decide(ten.fold(seen[:2])).batch_size == B0
