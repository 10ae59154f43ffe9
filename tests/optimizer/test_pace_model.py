"""``zeus-voi`` revision 5: an untried batch size's cost predicted as epochs x pace."""

from __future__ import annotations

import math
import random

import pytest

from tests.optimizer.revisions import voi
from zeus_run.optimizer import Observation
from zeus_run.optimizer.legacy.pace import fit_epochs, model_log_cost, pace_prior

BS = (64, 128, 256, 512, 1024, 2048)


def law(b: int, a: float = 10.0, bnoise: float = 256.0) -> float:
    """McCandlish et al.'s epochs to the target: Emin/N (1 + B/Bnoise)."""
    return a * (1.0 + b / bnoise)


def test_the_fit_recovers_the_law_from_noisy_runs():
    rng = random.Random(7)
    runs = {b: [law(b) * math.exp(rng.gauss(0.0, 0.05)) for _ in range(6)] for b in (64, 128, 256, 512)}
    fit = fit_epochs(runs)
    assert fit is not None
    assert fit.a == pytest.approx(10.0, rel=0.1)
    assert fit.critical_batch_size == pytest.approx(256.0, rel=0.15)
    mu, sd = fit.predict(1024)
    assert math.exp(mu) == pytest.approx(law(1024), rel=0.15)  # two doublings beyond the data
    assert sd > fit.predict(512)[1]  # farther from the data, less certain


def test_one_batch_size_is_too_few_to_fit():
    assert fit_epochs({256: [20.0, 21.0]}) is None
    assert model_log_cost({256: [20.0]}, {256: 100.0}, 512) is None


def test_epochs_falling_with_the_batch_size_are_outside_the_law_and_stay_at_the_nearest_level():
    fit = fit_epochs({128: [32.0], 192: [25.0], 256: [21.0]})
    assert fit is not None and fit.k == 0.0
    assert math.exp(fit.predict(64)[0]) == pytest.approx(32.0)  # not the fit's mean of 26


@pytest.mark.parametrize(
    ("paces", "b", "expected"),
    [
        ({256: 1.0}, 512, math.sqrt(0.5)),  # one pace: the middle of slope [-1, 0]
        ({256: 2.0, 512: 1.0}, 1024, 0.5),  # slope -1 continued
        ({256: 1.0, 512: 1.5}, 1024, 1.5),  # a rising pace is clamped to slope 0
        ({256: 1.0, 512: 0.25}, 1024, 0.125),  # a pace falling faster than 1/B is clamped to slope -1
        ({256: 1.0, 512: 0.5}, 128, 2.0),  # downwards: at most B/b times slower
    ],
)
def test_the_pace_prior_keeps_the_slope_in_its_physical_range(paces, b, expected):
    prior = pace_prior(paces, b)
    assert prior is not None
    assert math.exp(prior[0]) == pytest.approx(expected)


def observations(seed: int) -> list[Observation]:
    rng = random.Random(seed)
    out = []
    for b in (256, 512, 128, 512, 256, 512):
        epochs = round(law(b) * math.exp(rng.gauss(0.0, 0.05)))
        out.append(Observation(b, epochs * 1000.0 / b**0.5 * (1.0 + rng.random() * 0.05), True, epochs=epochs))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_revision_5_is_a_pure_function_of_the_observations(seed):
    obs = observations(seed)
    a, b = (
        voi(BS, 256, seed=3, horizon=24, revision=5),
        voi(BS, 256, seed=3, horizon=24, revision=5),
    )
    for k in range(len(obs) + 1):
        sa, sb = a.fold(obs[:k]), b.fold(list(obs[:k]))
        assert sa == sb
        assert a.decide(sa) == b.decide(sb) == a.decide(a.fold(obs[:k]))


def test_with_one_batch_size_converged_revision_5_decides_as_revision_4():
    obs = [Observation(256, 100.0, True, epochs=20), Observation(256, 98.0, True, epochs=20)]
    r4, r5 = (voi(BS, 256, seed=3, horizon=24, revision=r) for r in (4, 5))
    assert r5.decide(r5.fold(obs)) == r4.decide(r4.fold(obs))


def test_the_model_stops_a_walk_that_the_law_says_cannot_pay():
    """Beyond the critical batch size epochs grow with B while pace no longer falls: no probe upwards."""
    # pace flat above 256, epochs = 10 (1 + B / 128): each doubling costs about 1.7x
    obs = [Observation(b, law(b, bnoise=128.0) * 50.0, True, epochs=round(law(b, bnoise=128.0))) for b in (256, 512)]
    r5 = voi(BS, 256, seed=3, horizon=24, revision=5)
    state = r5.fold(obs)
    est, cv2 = r5.posterior(state)
    prior = r5.model_prior(state, est, 1024, cv2, (math.log(est[512].mean), 1.0))
    assert prior is not None and math.exp(prior[0]) > est[512].mean
    assert r5.decide(state).stage != "pruning" or r5.decide(state).batch_size != 1024
