"""`zeus_run.door.opening`: every door finds and opens a job the same way (`locate`, `open_job`)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path

import pytest

from tests.launcher.test_faults import spec_text
from zeus_run.contract import ASK_EXECUTOR, RunningMarker, StopReason
from zeus_run.door.opening import locate, open_job
from zeus_run.energy import EstimatedEnergy
from zeus_run.errors import RunDirBusy
from zeus_run.rundir.opener import lock
from zeus_run.rundir.store import RunDir
from zeus_run.spec import load_spec


@pytest.fixture
def job(write_spec):
    spec = load_spec(write_spec(spec_text()))
    where = locate(spec)
    with lock(where.path, "run") as rd:
        rd.save_spec(spec)
        # A launcher that died with a trial in flight, and an ask in flight.
        rd.mark_running(RunningMarker(1, 1, 0, 2, stage="default", pid=12345, max_power=100.0))
        rd.mark_running(RunningMarker(1, 2, 1, 2, executor=ASK_EXECUTOR, host="h", asked_at=time.time()))
    return where.spec, where.path


def _markers(path: Path) -> list[RunningMarker]:
    with lock(path, "ask") as rd:
        return rd.running_trials() or []


def test_a_dead_launchers_trial_is_recorded_as_interrupted_and_the_asks_are_kept(job):
    spec, path = job
    adopted_from: list[list[int]] = []

    def adopt_none(markers: list[RunningMarker]) -> set[int]:
        adopted_from.append([m.trial for m in markers])
        return set()

    with open_job(path, spec, "ask", cleanup=adopt_none) as opened:
        assert [m.trial for m in opened.asks] == [1] and opened.adopted == []
        assert opened.history is not None
        (record,) = opened.history
    assert adopted_from == [[0]]  # only the launcher's trial goes to the executors
    assert (record.trial, record.stop_reason, record.observed) == (0, StopReason.INTERRUPTED, False)
    assert "died during this trial" in (record.message or "")
    assert [m.trial for m in _markers(path)] == [1]


def _expire_the_ask(path: Path) -> None:
    with lock(path, "ask") as rd:
        markers = rd.running_trials() or []
        rd.track_running(markers)
        (ask,) = [m for m in markers if m.asked]
        rd.mark_running(dataclasses.replace(ask, asked_at=1.0, lease=1.0))  # asked long ago, never renewed


def test_a_trial_the_executors_adopt_goes_on_marked_and_an_expired_ask_is_recorded(job):
    spec, path = job
    _expire_the_ask(path)
    with open_job(path, spec, "run", cleanup=lambda markers: {0}) as opened:
        assert [r.trial for r in opened.adopted] == [0]
        assert [(r.trial, r.stop_reason) for r in opened.records()] == [(1, StopReason.INFRASTRUCTURE)]
        assert opened.engine is not None and opened.engine.recurrences == spec.recurrences
    assert sorted(m.trial for m in _markers(path)) == [0]


def test_a_launcher_refuses_to_run_beside_a_live_ask(job):
    spec, path = job
    with pytest.raises(RunDirBusy, match="ask"), open_job(path, spec, "run", cleanup=lambda markers: {0}):
        pass
    assert sorted(m.trial for m in _markers(path)) == [0, 1]


def test_a_registration_settles_nothing(job):
    spec, path = job
    with open_job(path, spec, "register") as opened:
        assert opened.history is None and [m.trial for m in opened.asks] == [1] and opened.engine is None
    assert sorted(m.trial for m in _markers(path)) == [0, 1]


def test_the_door_steps_under_the_lock_are_undone_before_it_is_let_go(job):
    spec, path = job
    seen: list[str] = []

    @contextlib.contextmanager
    def energy():
        try:
            yield EstimatedEnergy(100.0)
        finally:
            with pytest.raises(RunDirBusy):  # still held while the door's steps are undone
                RunDir.open(path)
            seen.append("undone")

    with pytest.raises(RunDirBusy, match="ask"), open_job(path, spec, "run", energy=energy):
        pass  # the live ask: refused, after the energy source opened
    assert seen == ["undone"]
    with lock(path, "run"):  # and let go after
        pass
