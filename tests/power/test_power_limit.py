"""The JIT power-limit policy, checked by hand."""

from __future__ import annotations

import pytest

from zeus_run.optimizer import JITPowerLimitOptimizer, PowerLimitMeasurement, best_power_limit

# Epoch at 100 W: 5 s at 90 W avg -> (0.5 * 90 + 0.5 * 200) * 5 = 725 J; at 200 W: 4 s at 180 W -> 760 J.
PROFILE = [PowerLimitMeasurement(100, 90, 1 / 5), PowerLimitMeasurement(200, 180, 1 / 4)]


def test_picks_lowest_cost_per_unit_of_work():
    assert best_power_limit(PROFILE, 0.5, 200) == 100
    # Time only (eta 0): 200 * 4 s < 200 * 5 s.
    assert best_power_limit(PROFILE, 0.0, 200) == 200


def test_tie_goes_to_higher_limit_and_empty_profile_fails():
    tie = [PowerLimitMeasurement(100, 100, 1.0), PowerLimitMeasurement(150, 100, 1.0)]
    assert best_power_limit(tie, 0.5, 200) == 150
    with pytest.raises(ValueError, match="empty"):
        best_power_limit([], 0.5, 200)


def test_remembers_per_batch_size():
    plo = JITPowerLimitOptimizer(0.5, 200)
    s0 = plo.initial_state()
    s1 = plo.observe_profile(s0, 8, PROFILE)
    assert s0.predict(8) is None
    assert s1.predict(8) == 100 and s1.predict(16) is None
    with pytest.raises(ValueError):
        JITPowerLimitOptimizer(1.5, 200)
