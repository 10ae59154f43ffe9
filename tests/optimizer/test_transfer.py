"""``zeus-voi`` revision 11's warm start: an untried batch size costs its epochs carried over times its pace here."""

from __future__ import annotations

import math

import pytest

from zeus_run.optimizer import Observation, TransferVOIOptimizer, ZeusVOIOptimizer, make_optimizer
from zeus_run.optimizer.legacy.rev10 import WarmStart
from zeus_run.optimizer.legacy.rev10 import ZeusVOIOptimizer as Revision10
from zeus_run.optimizer.legacy.rev10.transfer import EPOCHS_SD, PACE_SD, candidates, log_epochs, log_pace
from zeus_run.optimizer.legacy.rev10.warm import candidates as ratio_candidates
from zeus_run.spec import OptimizerSettings

BS = (32, 64, 128, 256, 512, 1024, 2048)
B0 = 1024


def source(*seen: tuple[int, int | None, float]) -> WarmStart:
    """The source's runs ``(batch size, epochs or None: never reached, pace there)``."""
    obs = [Observation(b, (e or 10) * p, e is not None, epochs=e or 10) for b, e, p in seen]
    return WarmStart("elsewhere", "sha256:test", tuple(obs))


#: The other GPU ran b0 (79 epochs), 512 (43), 128 (20 twice) and 64 (18); 32 never converged there.
SOURCE = source(
    (1024, 79, 2000.0),
    (512, 43, 2100.0),
    (128, 20, 3600.0),
    (128, 20, 3600.0),
    (64, 18, 6300.0),
    (32, None, 11000.0),
)


def opt(revision: int = 11) -> Revision10:
    cls = TransferVOIOptimizer if revision == 11 else Revision10
    return cls(BS, B0, seed=1, horizon=24, warm=SOURCE)


def test_pace_between_two_measured_here_is_a_bridge_and_beyond_continues_the_source_s_shape():
    paces = {128: (math.log(10.0), 0.0), 512: (math.log(40.0), 0.0)}
    mean, var = log_pace(paces, 256)  # half way in log batch size: the geometric mean, a bridge of PACE_SD
    assert math.exp(mean) == pytest.approx(20.0) and var == pytest.approx(PACE_SD**2 * 0.5)
    # Beyond 512: the source's change from 512 to 1024 (its pace halves there), from 512's level here.
    mean, var = log_pace(paces, 1024, {512: math.log(7.0), 1024: math.log(3.5)})
    assert math.exp(mean) == pytest.approx(20.0) and var == pytest.approx(PACE_SD**2)
    # Without the source there: the slope of the two measured here (pace doubles a doubling) clipped to RISE.
    mean, _ = log_pace(paces, 1024)
    assert mean == pytest.approx(math.log(40.0) + 0.2)


def test_epochs_between_two_the_source_ran_are_read_on_the_line_of_their_logs():
    mean, var = log_epochs({128: (40, 2), 512: (90, 2)}, 0.01, 256)  # two runs each: 20 + 20 and 45 + 45 epochs
    assert math.exp(mean) == pytest.approx(30.0)  # sqrt(20 x 45)
    assert var == pytest.approx(0.25 * 0.01 / 2 + 0.25 * 0.01 / 2 + EPOCHS_SD**2 * 0.5)
    assert log_epochs({128: (20, 1)}, 0.01, 256) is None  # nothing beyond: no line


def test_after_b0_a_batch_size_costs_its_epochs_times_its_pace_here_not_its_cost_there():
    """b0 ran here 79 epochs at 1500 per epoch. 128 converged there in 20 epochs at 3600 per epoch, where b0 ran at
    2000: its pace here is b0's here moved by the source's change of pace, 1500 x 3600 / 2000, times its epochs."""
    o = opt()
    state = o.observe(o.initial_state(), Observation(B0, 79 * 1500.0, True, epochs=79))
    est, cv2 = o.posterior(state)
    found = {b: prior for b, _, prior in candidates(o, state, est, cv2)}
    assert 32 not in found and set(found) >= {64, 128, 512}
    mu, _ = found[128]
    assert math.exp(mu) == pytest.approx(20 * 1500.0 * 3600.0 / 2000.0)


def test_a_pace_measured_here_replaces_the_source_s_between_measured_batch_sizes():
    """Once 128 and b0 ran here, 512 is priced by this GPU's paces at 128 and 1024 alone."""
    o = opt()
    state = o.initial_state()
    for b, e, pace in [(B0, 79, 1000.0), (128, 20, 4000.0)]:  # 128 here is far slower than the source says
        state = o.observe(state, Observation(b, e * pace, True, epochs=e))
    est, cv2 = o.posterior(state)
    found = {b: prior for b, _, prior in candidates(o, state, est, cv2)}
    mu, _ = found[512]
    pace = math.exp((math.log(1000.0) * 2 + math.log(4000.0)) / 3)  # 512 lies 2/3 of the way from 128 to 1024
    assert math.exp(mu) == pytest.approx(43 * pace, rel=0.01)


def test_revision_10_keeps_its_warm_prediction():
    """The same state gives revision 10 its cost-ratio prediction (`_warm.candidates`): the revisions differ."""
    ten, eleven = opt(10), opt(11)
    seen = [Observation(B0, 79 * 1000.0, True, epochs=79), Observation(128, 20 * 4000.0, True, epochs=20)]
    assert ten.fold(seen).warm == eleven.fold(seen).warm
    est, cv2 = eleven.posterior(eleven.fold(seen))
    a = {b: p for b, _, p in ratio_candidates(ten, ten.fold(seen), est, cv2)}
    b = {b: p for b, _, p in candidates(eleven, eleven.fold(seen), est, cv2)}
    assert a[512] != pytest.approx(b[512])


def test_cold_revision_11_decides_as_revision_10():
    seen = [Observation(B0, 125_000.0, True, epochs=79), Observation(512, 72_000.0, True, epochs=43)]
    ten = Revision10(BS, B0, seed=1, horizon=24)
    eleven = TransferVOIOptimizer(BS, B0, seed=1, horizon=24)
    for n in range(len(seen) + 1):
        assert ten.decide(ten.fold(seen[:n])) == eleven.decide(eleven.fold(seen[:n]))


def test_a_spec_asks_for_revision_11_by_number_and_the_default_is_12():
    assert OptimizerSettings().revision == 12
    eleven = make_optimizer(OptimizerSettings(revision=11), BS, B0, seed=1, horizon=24, warm=SOURCE)
    assert type(eleven) is TransferVOIOptimizer and eleven.revision == 11
    assert type(eleven.with_horizon(12)) is TransferVOIOptimizer  # a copy planning over another horizon keeps it
    assert type(make_optimizer(OptimizerSettings(), BS, B0, seed=1)) is ZeusVOIOptimizer
    with pytest.raises(ValueError, match="revision must be one of"):
        make_optimizer(OptimizerSettings(revision=13), BS, B0, seed=1)
