"""A measured trial whose start-up was estimated says so, and the optimizer is told how much (issue 46)."""

from __future__ import annotations

import pytest

from tests.factories import make_record
from zeus_run.engine.position import estimated_share, observation_of, power_share
from zeus_run.engine.record import Measurement, estimated_part

WINDOW = {
    "by": "script",
    "from": "process-start",
    "extended_s": 1.5,
    "extended_j": 300.0,
    "extended_at": "power-at-start",
}


def test_an_estimated_start_up_makes_the_record_estimated_with_its_joules_and_share():
    got = estimated_part(Measurement("nvml", False, "counter", WINDOW), {"energy": 900.0, "after_energy": 300.0})
    assert got == {"estimated": True, "estimated_energy": 300.0, "estimated_share": pytest.approx(0.25)}


@pytest.mark.parametrize(
    "how",
    [
        Measurement("nvml", False, "counter", {"by": "script", "from": "process-start", "start": "ask-counter"}),
        Measurement("nvml", False, "counter", {"by": "launcher", "from": "launch", "to": "exit"}),
        Measurement("estimate", True, "watts-x-time", WINDOW),  # an estimate whole says so already
    ],
)
def test_a_measured_start_up_or_a_whole_estimate_adds_nothing(how):
    assert estimated_part(how, {"energy": 900.0}) == {}


def test_the_observation_carries_the_estimated_share_and_old_records_read_as_before():
    partial = make_record(0, energy_source="nvml", estimated=True, estimated_energy=30.0, estimated_share=0.2)
    whole = make_record(1, energy_source="estimate", estimated=True)
    old = make_record(2, energy_source="nvml", window=WINDOW)  # written before: its start-up not said estimated
    assert [estimated_share(r) for r in (partial, whole, old)] == [0.2, 1.0, 0.0]
    assert observation_of(partial).estimated == 0.2
    # the power a partly estimated trial drew still counts as measured (revision 10 reads it)
    assert power_share(partial) == power_share(make_record(0, energy_source="nvml")) > 0
    assert power_share(whole) == 0.0
