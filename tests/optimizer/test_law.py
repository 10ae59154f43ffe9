"""``zeus-voi`` revision 10: the laws of epochs and pace, fitted by hand; a jump only where two runs identify them."""

from __future__ import annotations

import math

import pytest

from tests.optimizer.revisions import voi
from zeus_run.optimizer import Observation, ZeusVOIOptimizer
from zeus_run.optimizer.voi.laws import (
    between,
    floor,
    identified,
    idle,
    jump,
    pooled_noise,
    walk_grid,
)
from zeus_run.optimizer.voi.warm import epochs

BS = (32, 64, 128, 256, 512, 1024, 2048, 4096)
B0 = 1024


def epochs_noise(epochs) -> float:
    """The relative variance of one run's epochs, by hand: each batch size's sum of squared deviations of its log
    epochs over its runs, pooled with 2 pseudo degrees of freedom at 10% (`EPOCHS_PRIOR_SD`, `EPOCHS_PRIOR_DOF`)."""
    ss, dof = 2 * 0.1**2, 2.0
    for runs in epochs.values():
        logs = [math.log(e) for e in runs]
        if len(logs) >= 2:
            mean = sum(logs) / len(logs)
            ss += sum((x - mean) ** 2 for x in logs)
            dof += len(logs) - 1
    return ss / dof


def opt(**kw) -> ZeusVOIOptimizer:
    return voi(BS, B0, seed=1, horizon=kw.pop("horizon", 24), **kw)


def runs(o: ZeusVOIOptimizer, *seen: tuple[int, int, float]):
    """The state after converged runs ``(batch size, epochs, pace)`` (cost = epochs x pace), in order."""
    return o.fold(Observation(b, e * p, True, epochs=e) for b, e, p in seen)


def test_the_laws_through_two_runs_are_the_two_point_fits():
    """By hand: epochs 79 at 1024 and 43 at 512 give k = 36 / 512 and a = 43 - 36 = 7; paces 1593 and 1677 give
    beta = 84 / (1/512 - 1/1024) = 86016 and alpha = 1677 - 86016 / 512 = 1509."""
    o = opt()
    state = runs(o, (1024, 79, 1593.0), (512, 43, 1677.0))
    est, _ = o.posterior(state)
    a, k, alpha, beta = identified(epochs(state), est, 512, 1024, 0.01)
    assert k == pytest.approx(36 / 512)
    assert a == pytest.approx(7.0)
    assert beta == pytest.approx(86016.0)
    assert alpha == pytest.approx(1509.0)


def test_an_identified_descent_jumps_to_the_cheapest_batch_size_the_laws_reach():
    """From 512 (the end) and 1024 (inside), the laws reach twice their distance: 128 (two walk steps on).
    Its cost by the laws: (7 + 128 k)(alpha + beta / 128) = 16 x 2181 against 43 x 1677 at 512."""
    o = opt()
    state = runs(o, (1024, 79, 1593.0), (512, 43, 1677.0))
    est, cv2 = o.posterior(state)
    (b, why, (mu, sd)), (up, _, (mu_up, _)) = jump(o, state, epochs(state), est, cv2, 0.01)
    assert b == 128 and "jump" in why and why.startswith("downwards")
    # upwards the same laws reach 4096 and price it far above 1024: the probe's value rules it out
    assert up == 4096 and math.exp(mu_up) > 3 * est[1024].mean
    assert math.exp(mu) / est[512].mean == pytest.approx(16 * 2181 / (43 * 1677))
    assert sd == pytest.approx(math.sqrt(2 * o.STEP_SD**2 + est[512].var / est[512].mean ** 2 + cv2))
    decision = o.decide(state)
    assert decision.batch_size == 128  # and the walk takes it: the saving over 22 recurrences pays for it


@pytest.mark.parametrize(
    ("why", "seen"),
    [
        # the two counts differ by less than their noise (one run each, 10% sd: about 2.9 epochs)
        ("epochs within their noise", [(1024, 21, 1600.0), (512, 20, 1700.0)]),
        # epochs fall as the batch size grows: the law (a + k B, k >= 0) does not hold
        ("epochs falling with the batch size", [(1024, 20, 1600.0), (512, 32, 1700.0)]),
        # pace falls as the batch size falls (padding): alpha + beta / B does not hold
        ("pace rising with the batch size", [(1024, 79, 1700.0), (512, 43, 1600.0)]),
        # epochs grow faster than the batch size: a < 0
        ("epochs faster than the batch size", [(1024, 100, 1600.0), (512, 43, 1700.0)]),
    ],
)
def test_no_jump_where_the_runs_do_not_identify_the_laws(why, seen):
    o = opt()
    state = runs(o, *seen)
    est, cv2 = o.posterior(state)
    assert identified(epochs(state), est, 512, 1024, pooled_noise(state.epoch_logs.values())) is None, why
    assert jump(o, state, epochs(state), est, cv2, pooled_noise(state.epoch_logs.values())) == [], why
    assert "jump" not in o.decide(state).detail


def test_with_b0_alone_the_laws_are_blind():
    o = opt()
    state = runs(o, (1024, 79, 1593.0))
    est, cv2 = o.posterior(state)
    assert jump(o, state, epochs(state), est, cv2, 0.01) == []
    assert o.decide(state).batch_size in (512, 2048)  # the walk's neighbour


def test_upwards_only_pace_can_save_and_it_falls_at_most_to_alpha():
    """Above 1024 (leader 1024, inner 512): epochs cannot fall, pace falls at most to alpha = 1509 of 1593."""
    o = opt()
    state = runs(o, (1024, 79, 1593.0), (512, 43, 1677.0))
    est, _ = o.posterior(state)
    low = floor(epochs(state), est, 1024, 512, 1024, 2048, 0.01)
    assert low == pytest.approx(est[1024].mean * 1509.0 / 1593.0)
    flat = runs(o, (1024, 20, 1600.0), (512, 20, 1590.0))  # pace rose with the batch size: nothing to gain
    est, _ = o.posterior(flat)
    assert floor(epochs(flat), est, 1024, 512, 1024, 2048, 0.01) == pytest.approx(est[1024].mean)


def test_downwards_epochs_fall_at_most_along_the_law_read_one_noise_on_the_optimistic_side():
    """Below 512 (leader 512, inner 1024): pace does not fall; epochs fall at most along a + k B through the two
    counts moved one noise apart: k = (79 + z - (43 - z')) / 512."""
    o = opt()
    state = runs(o, (1024, 79, 1593.0), (512, 43, 1677.0))
    est, _ = o.posterior(state)
    noise = math.sqrt(0.01 * (43**2 + 79**2))
    k = (79 - 43 + noise) / 512
    expected = est[512].mean * max(0.0, 43 - k * (512 - 256)) / 43
    assert floor(epochs(state), est, 512, 1024, 512, 256, 0.01) == pytest.approx(expected)
    # pace that fell from 1024 to 512 (outside the law) may go on falling at that log-log rate
    padded = runs(o, (1024, 79, 1700.0), (512, 43, 1600.0))
    est, _ = o.posterior(padded)
    slope = math.log(1700.0 / 1600.0) / math.log(2.0)
    pace = 1600.0 * 0.5**slope
    expected = est[512].mean * (pace / 1600.0) * max(0.0, 43 - k * 256) / 43
    assert floor(epochs(padded), est, 512, 1024, 512, 256, 0.01) == pytest.approx(expected)


def test_a_probe_the_laws_rule_out_is_not_run_unless_the_runs_contradict_them():
    """b0 256 is the leader; 192 ran dearer at the same pace. Upwards pace rose a little: nothing to gain above
    256, whatever the walk's trend says; revision 9 probes 360 there. Where the two counts contradict the law
    (epochs that fell by more than two noises as the batch size grew, `REFUTE`), it bounds nothing: 360 is probed."""
    bs = (64, 128, 192, 256, 360, 512)
    new = voi(bs, 256, seed=1, horizon=24, revision=10)
    old = voi(bs, 256, seed=1, horizon=24, revision=9)
    agree = [(256, 21, 0.970), (192, 22, 0.963)]  # a count one epoch apart: within their noise
    assert old.decide(runs(old, *agree)).batch_size == 360
    assert new.decide(runs(new, *agree)).batch_size != 360
    within = [(256, 21, 0.970), (192, 26, 0.963)]  # five epochs apart: one noise (3.4 epochs), not two
    state = runs(new, *within)
    est, _ = new.posterior(state)
    assert floor(epochs(state), est, 256, 192, 256, 360, 0.01) is not None
    contradict = [(256, 21, 0.970), (192, 31, 0.963)]  # ten epochs apart: more than two noises (7.5 epochs)
    state = runs(new, *contradict)
    est, _ = new.posterior(state)
    assert floor(epochs(state), est, 256, 192, 256, 360, 0.01) is None
    assert new.decide(state).batch_size == 360


def test_the_noise_of_epochs_pools_the_batch_sizes_run_twice():
    assert pooled_noise([]) == pytest.approx(0.01)  # the prior: 10% per run
    o = opt()
    state = runs(o, (64, 4, 1.0), (64, 5, 1.0), (64, 4, 1.0), (64, 5, 1.0), (128, 4, 1.0))
    logs = [math.log(e) for e in (4, 5, 4, 5)]
    mean = sum(logs) / 4
    ss = sum((x - mean) ** 2 for x in logs)
    assert pooled_noise(state.epoch_logs.values()) == pytest.approx((2 * 0.01 + ss) / (2 + 3))


def test_the_walk_steps_half_a_doubling_whatever_the_list():
    fine = (2, 4, 8, 12, 16, 24, 32, 48, 56, 64, 72, 96, 128, 156, 192)
    assert walk_grid(fine, 192) == (2, 4, 8, 12, 16, 24, 32, 48, 72, 96, 128, 192)
    assert walk_grid(BS, B0) == BS  # a list of doublings is walked as it is
    squad = (8, 12, 16, 24, 32, 48, 56)
    assert walk_grid(squad, 32) == squad


def test_a_gpu_b0_keeps_less_than_half_busy_is_walked_upwards_first():
    o = opt()
    busy = o.fold([Observation(B0, 100.0, True, epochs=5, power=0.7)])
    idle_gpu = o.fold([Observation(B0, 100.0, True, epochs=5, power=0.2)])
    unmeasured = o.fold([Observation(B0, 100.0, True, epochs=5)])
    assert not idle(o, busy) and idle(o, idle_gpu) and not idle(o, unmeasured)
    assert o.decide(busy).batch_size == 512  # downwards first, as every revision before
    assert o.decide(idle_gpu).batch_size == 2048
    assert o.decide(unmeasured).batch_size == 512


def test_between_two_runs_a_gap_costs_at_least_the_lesser_epochs_times_the_lesser_pace():
    """Between 512 (43 epochs, pace 1677) and 2048 (200 epochs, pace 1585): each factor changes monotonically
    across the gap, so 1024 costs at least 43 x (1 - one noise) x 1585; with no run above it, nothing bounds it."""
    o = opt()
    state = runs(o, (512, 43, 1677.0), (2048, 200, 1585.0))
    est, _ = o.posterior(state)
    pace = {b: est[b].mean / e for b, e in ((512, 43), (2048, 200))}  # the posterior's paces: 1677, 1585
    count = 43 * (1.0 - math.sqrt(0.01))
    low = between(epochs(state), est, 512, 1024, 0.01)
    assert low == pytest.approx(count * pace[2048])
    assert low < est[512].mean
    assert between(epochs(state), est, 512, 4096, 0.01) is None


def test_the_state_keeps_the_noise_as_totals_that_agree_with_the_runs():
    o = opt()
    state = runs(o, (1024, 5, 1.0e6), (1024, 4, 0.9e6), (512, 4, 0.8e6), (512, 6, 1.1e6), (256, 3, 0.7e6))
    seen = {1024: (5, 4), 512: (4, 6), 256: (3,)}
    assert pooled_noise(state.epoch_logs.values()) == pytest.approx(epochs_noise(seen), rel=1e-12)
    assert {b: n for b, (n, _, _) in state.epoch_logs.items()} == {b: len(e) for b, e in seen.items()}
    assert epochs(state) == {b: (sum(e), len(e)) for b, e in seen.items()}  # the laws' running totals
