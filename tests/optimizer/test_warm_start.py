"""``zeus-voi`` revision 10's warm start, as a fold: the source's epochs carry over, its pace does not."""

from __future__ import annotations

import math

import pytest

from tests.optimizer.revisions import voi
from zeus_run.optimizer import Observation, WarmStart, ZeusVOIOptimizer, make_optimizer
from zeus_run.optimizer.voi.warm import WARM_SD, candidates, converge_chance, epochs
from zeus_run.spec import OptimizerSettings

BS = (32, 64, 128, 256, 512, 1024, 2048)
B0 = 1024


def source(*seen: tuple[int, int | None, float]) -> WarmStart:
    """The source's runs ``(batch size, epochs or None: never reached, pace there)``."""
    obs = [Observation(b, (e or 10) * p, e is not None, epochs=e or 10) for b, e, p in seen]
    return WarmStart("elsewhere", "sha256:test", tuple(obs))


#: On the other GPU the job ran b0 once, 128 many times (its best), 256 twice and 64 twice, and 32 never converged.
SOURCE = source(
    (1024, 79, 2000.0),
    (512, 43, 2100.0),
    (128, 20, 3600.0),
    (64, 18, 6300.0),
    (256, 31, 2500.0),
    *[(128, 19, 3600.0)] * 5,
    (256, 30, 2500.0),
    (64, 19, 6300.0),
    (32, None, 11000.0),
)


def opt(warm: WarmStart | None = SOURCE, horizon: int = 24) -> ZeusVOIOptimizer:
    return voi(BS, B0, seed=1, horizon=horizon, warm=warm)


def test_the_source_folds_into_its_own_part_of_the_state():
    o = opt()
    state = o.initial_state()
    assert state.step == 0 and not state.arms and state.spent == 0.0 and not state.epoch_totals
    assert state.warm[128].tried == 6 and state.warm[128].reached == 6 and state.warm[128].epochs[:2] == (20, 19)
    assert state.warm[32].tried == 1 and state.warm[32].reached == 0
    assert all(o.warm is not None and obs.warm for obs in o.warm.observations)
    assert o.decide(state).batch_size == B0  # b0 still runs first


def test_after_b0_the_walk_jumps_to_the_source_s_cheapest_batch_size_priced_at_this_gpu_s_pace():
    """b0 ran here at pace 1500 (2000 there): 128 is predicted at its cost there times 1500 / 2000."""
    o = opt()
    state = o.observe(o.initial_state(), Observation(B0, 79 * 1500.0, True, epochs=79))
    est, cv2 = o.posterior(state)
    found = {b: prior for b, _, prior in candidates(o, state, est, cv2)}
    assert set(found) == {64, 128, 256, 512}  # within the range the source ran to the target (32 never did)
    mu, sd = found[128]
    ratio = (19 * 3600.0) / (79 * 2000.0)  # median cost there over b0's there
    assert math.exp(mu) == pytest.approx(est[B0].mean * ratio)
    var_b0 = est[B0].var / est[B0].mean ** 2
    # the ratio wanders as a random walk, WARM_SD per doubling (3 from b0); b0 there ran once, 128 six times
    assert sd == pytest.approx(math.sqrt(var_b0 + cv2 / 1 + WARM_SD**2 * 3 + cv2 / 6 + cv2))
    decision = o.decide(state)
    assert decision.batch_size == 128 and decision.detail.startswith("warm:")


def test_a_batch_size_the_source_never_converged_is_a_poor_probe():
    o = opt()
    state = o.initial_state()
    assert converge_chance(o, state, 32) == pytest.approx(0.5 / 2)  # Jeffreys: (0 + 1/2) / (1 + 1)
    assert converge_chance(o, state, 128) == pytest.approx(6.5 / 7)
    assert converge_chance(o, state, 2048) is None  # not run there: this run's own chance
    assert epochs(state)[64] == (18 + 19, 2)  # epochs to the target carry over (their sum and count)


def test_the_source_seeds_the_bandit_it_does_not_replace_it():
    """A source whose best batch size is dear here: after that probe the walk goes on from what ran here."""
    o = opt()
    state = o.initial_state()
    for b, e, pace in [(B0, 79, 1500.0), (128, 20, 6000.0)]:  # 128 runs twice as slowly here as the source says
        state = o.observe(state, Observation(b, e * pace, True, epochs=e))
    later = [o.decide(state).batch_size]
    assert later[0] != 128 and later[0] in BS


def test_without_a_source_revision_10_decides_as_a_cold_start_and_the_source_is_input_to_the_fold():
    cold, warm = opt(None), opt()
    seen = [Observation(B0, 125_000.0, True, epochs=79), Observation(512, 72_000.0, True, epochs=43)]
    assert cold.fold(seen).warm == {}
    again = opt()
    assert warm.decide(warm.fold(seen)) == again.decide(again.fold(seen))  # a pure function of source + runs


def test_only_zeus_voi_revision_10_starts_warm():
    with pytest.raises(ValueError, match="revision 10"):
        make_optimizer(OptimizerSettings(revision=9), BS, B0, 1, 24, SOURCE)
    with pytest.raises(ValueError, match="zeus-voi"):
        make_optimizer(OptimizerSettings.for_policy("zeus"), BS, B0, 1, 24, SOURCE)
    assert make_optimizer(OptimizerSettings(), BS, B0, 1, 24, SOURCE).warm is SOURCE
