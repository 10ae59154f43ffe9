"""A script started after a shell's ask on the same host measures its start-up from the counter the ask read; where
that reading is not of its counter, it estimates, and says so (issue 46)."""

from __future__ import annotations

import json
import socket
import time

import pytest

import zeus_run.energy as energy_mod
from zeus_run.energy import SelfMeter
from zeus_run.energy._base import EnergySource
from zeus_run.energy._self import ask_reading

#: What the device draws (W) and what it reads as its power when the meter opens (a start-up model's figure).
DRAW_W, POWER_AT_OPEN_W = 200.0, 50.0
ORIGIN = time.time() - 100.0


class DeviceCounter(EnergySource):
    """One device's counter, the same in every reader (it counts from `ORIGIN` at `DRAW_W`)."""

    name = "nvml"
    estimated = False

    def __init__(self) -> None:
        self._opened = self.counter()

    @property
    def max_power(self) -> float:
        return 300.0

    def counter(self) -> float | None:
        return DRAW_W * (time.time() - ORIGIN)

    def read(self) -> float:
        return (self.counter() or 0.0) - self._opened

    def power(self) -> float | None:
        return POWER_AT_OPEN_W

    def describe(self) -> str:
        return "a device counter"


SETTINGS = {"source": "nvml", "watts": 100.0, "basis": "wall-time", "gpus": None, "include": ["gpu"]}


@pytest.fixture(autouse=True)
def device(monkeypatch):
    monkeypatch.setattr(energy_mod, "open_energy_source", lambda settings: DeviceCounter())


def test_the_start_up_is_the_counters_difference_since_the_ask():
    at_ask = ask_reading(SETTINGS)
    assert at_ask is not None and at_ask["host"] == socket.gethostname()
    time.sleep(0.2)  # the shell starts the script
    since = time.time()
    time.sleep(0.3)  # its start-up
    m = SelfMeter(SETTINGS, since=since, at_ask=at_ask)
    assert (m.window["from"], m.window["start"]) == ("process-start", "ask-counter")
    assert "extended_j" not in m.window and not m.info()["estimated"]
    t, e = m.now()
    assert t == pytest.approx(0.3, abs=0.1)
    assert e == pytest.approx(DRAW_W * t, rel=0.05)  # what the device drew, not the power read at the open
    m.close()


@pytest.mark.parametrize(
    "change",
    [
        {"host": "another-host"},
        {"gpus": ["3"]},
        {"source": "rapl"},
        {"energy": "lots"},
        {"at": "later"},
    ],
)
def test_a_reading_of_another_counter_is_not_used_and_the_start_up_is_estimated(change):
    at_ask = {**(ask_reading(SETTINGS) or {}), **change}
    m = SelfMeter(SETTINGS, since=time.time() - 0.5, at_ask=at_ask)
    assert m.window["extended_at"] == "power-at-start" and "start" not in m.window
    assert m.window["extended_j"] == pytest.approx(POWER_AT_OPEN_W * m.window["extended_s"])
    m.close()


def test_a_reading_taken_after_the_process_started_is_not_its_start_up():
    since = time.time()
    time.sleep(0.1)
    m = SelfMeter(SETTINGS, since=since, at_ask=ask_reading(SETTINGS))  # it asked for itself, after its start
    assert m.window["extended_at"] == "power-at-start"
    m.close()


def test_a_start_up_long_after_the_ask_is_a_labelled_share_not_a_measurement():
    """Issue 54, 2: the shell did other work between its ask and the script: the process's time share of the
    counter's difference since the ask is an estimate, and the record says so (``extended_j``: its estimated part)."""
    from zeus_run.energy._self import ASK_GAP_S

    at_ask = ask_reading(SETTINGS)
    time.sleep(ASK_GAP_S + 0.3)  # the shell does something else first
    since = time.time()
    time.sleep(0.2)
    m = SelfMeter(SETTINGS, since=since, at_ask=at_ask)
    assert m.window["start"] == "ask-counter" and m.window.get("extended_at") == "ask-counter-share", m.window
    assert m.window["extended_j"] > 0 and m.window["extended_s"] == pytest.approx(0.2, abs=0.1), m.window
    m.close()


@pytest.mark.parametrize("case", ["asked-for-itself", "another-ask"])
def test_a_reading_left_by_an_earlier_eval_is_not_a_later_process_start_up(monkeypatch, case):
    """Issue 54, 2: ``ZEUS_ASK_ENERGY`` left exported by an earlier ``eval`` of another ask was taken as the start-up
    baseline of a later process (a `Job` API one that asked for itself), recorded as measured."""
    from zeus_run._process_trials import ProcessTrials
    from zeus_run.contract import Env, process_start_time

    started = process_start_time()
    assert started is not None
    stale = {**(ask_reading(SETTINGS) or {}), "at": started - 5.0, "token": "earlier-ask"}
    stale["energy"] = DRAW_W * (started - 5.0 - ORIGIN)
    monkeypatch.setenv(Env.ASK_ENERGY, json.dumps(stale))
    monkeypatch.setenv(Env.ASK_TOKEN, "earlier-ask" if case == "asked-for-itself" else "this-ask")
    itself = {"asked_outside": False} if case == "asked-for-itself" else {}  # the Job API's (train.py's) call
    meter, _ = ProcessTrials().open_meter(SETTINGS, True, **itself)
    assert meter is not None
    assert "start" not in meter.window and meter.window.get("extended_at") == "power-at-start", meter.window
    meter.close()
