"""`SelfMeter`: the window of a process that measures itself (start-up charged, carried from trial to trial, its
own ask left out). The doors' end-to-end check is tests/doors/test_window.py."""

from __future__ import annotations

import time

import pytest

from zeus_run.energy import SelfMeter
from zeus_run.energy._base import EnergySource

WALL = {"source": "estimate", "watts": 100.0, "basis": "wall-time", "gpus": None, "include": ["gpu"]}


def test_the_start_up_before_the_meter_is_charged_at_the_power_it_reads_when_it_opens():
    m = SelfMeter(WALL, since=time.time() - 2.0)
    w = m.window
    assert (w["by"], w["from"], w["extended_at"]) == ("script", "process-start", "power-at-start")
    assert w["extended_s"] == pytest.approx(2.0, abs=0.2)
    assert w["extended_j"] == pytest.approx(100.0 * w["extended_s"])
    t, e = m.now()
    assert t >= w["extended_s"] and e == pytest.approx(100.0 * t, rel=0.05)
    assert m.info()["window"] == w
    m.close()


def test_a_meter_without_a_start_counts_from_now():
    m = SelfMeter(WALL)
    assert m.window == {"by": "script", "from": "trial"} and m.now()[0] < 1.0
    m.close()


def test_the_next_trial_of_a_process_goes_on_from_the_last_reading_less_its_ask():
    first = SelfMeter(WALL, since=time.time() - 1.0)
    carry = first.handover()
    between = 0.3
    time.sleep(between)
    second = SelfMeter(WALL, since=time.time() - 99.0, carry=carry, ask_s=0.1)  # the carry wins over `since`
    assert second.source is first.source  # the same open counter
    assert second.window == {"by": "script", "from": "previous-trial", "ask_s": 0.1}
    t, e = second.now()
    assert t == pytest.approx(between - 0.1, abs=0.1) and e == pytest.approx(100.0 * t, rel=0.1)
    second.close()


def test_a_carry_of_other_settings_is_closed_and_not_used():
    first = SelfMeter(WALL)
    carry = first.handover()
    other = SelfMeter({**WALL, "watts": 50.0}, carry=carry)
    assert other.source is not first.source and other.window["from"] == "trial"
    other.close()


def test_the_process_start_up_on_the_cpu_time_basis_leaves_out_the_asks_cpu_time():
    cpu = {**WALL, "basis": "cpu-time"}
    whole = SelfMeter(cpu, since=time.time() - 60.0)
    less = SelfMeter(cpu, since=time.time() - 60.0, ask_cpu_s=whole.window["extended_j"] / 100.0)
    assert whole.window["extended_at"] == "cpu-time" and whole.window["extended_j"] > 0
    assert less.window["extended_j"] == pytest.approx(0.0, abs=2.0)  # all its CPU time was the "ask"
    whole.close()
    less.close()


class _NoPower(EnergySource):
    """A counter without a power reading (RAPL's shape): 50 W."""

    name = "rapl"

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    @property
    def max_power(self) -> float:
        return 100.0

    def read(self) -> float:
        return 50.0 * (time.monotonic() - self.t0)

    def describe(self) -> str:
        return "50 W counter"


def test_a_source_without_a_power_reading_is_sampled_for_the_start_up(monkeypatch):
    monkeypatch.setattr("zeus_run.energy.open_energy_source", lambda settings: _NoPower())
    m = SelfMeter({"source": "rapl"}, since=time.time() - 4.0)
    assert m.window["extended_at"] == "power-sampled-at-start"
    assert m.window["extended_j"] == pytest.approx(50.0 * m.window["extended_s"], rel=0.1)
