"""Epochs read in one burst at the script's exit (`zeus_run.trial.burst`): told apart, recorded, warned once, not paced."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from tests.factories import make_record
from zeus_run.optimizer.early_stop import Pace
from zeus_run.records import TrialRecord
from zeus_run.trial.burst import BURST, BurstWarning, epoch_timing


@pytest.mark.parametrize(
    ("arrivals", "end", "timing"),
    [
        ([6.0, 6.0, 6.001, 6.002], 6.01, BURST),  # the repro: 20 epochs, all at the exit
        ([54.0, 54.0, 54.1], 55.0, BURST),  # a large program tears down for a while after flushing
        ([5.9, 6.0, 6.1], 6.0, BURST),  # read while draining, after the exit was seen
        ([0.3, 0.6, 0.9, 1.2, 1.5], 1.6, None),  # line-timed epochs
        ([6.0, 6.0], 6.0, None),  # two lines are not "several epochs"
        ([0.05, 0.05, 0.06], 0.07, None),  # a script with no start-up time to speak of
        ([1.5, 1.5, 1.5], 1.5, None),  # ... or a slow start-up on a loaded machine
        ([2.0, 2.0, 2.0], 12.0, None),  # epochs printed together long before the exit (then saving)
        ([1.0, 3.0, 3.0, 3.0], 3.0, None),  # the first epoch came on its own
        ([], 5.0, None),
    ],
)
def test_a_burst_is_several_readings_at_once_at_the_exit_after_a_quiet_start(arrivals, end, timing):
    assert epoch_timing(arrivals, end) == timing


def record(**over) -> TrialRecord:
    base = dict(batch_size=32, reached=True, epochs=4, time=40.0, cost=400.0, metrics=(0.1, 0.2, 0.3, 0.9))
    return make_record(**{**base, **over})


def test_a_burst_records_field_round_trips_and_older_records_read_as_timed():
    burst = record(epoch_timing=BURST)
    assert TrialRecord.from_json(burst.to_json()) == burst and not burst.epochs_timed
    plain = record()
    assert "epoch_timing" not in plain.to_json()  # written as before the field existed
    assert TrialRecord.from_json(plain.to_json()).epochs_timed
    with pytest.raises(ValueError, match="epoch_timing"):
        TrialRecord.from_json({**plain.to_json(), "epoch_timing": 3})


def test_a_burst_teaches_no_pace_and_is_not_judged_slow():
    pace = Pace()
    pace.add(record(cost=400.0))  # 100 J per epoch
    pace.add(record(cost=4000.0, epoch_timing=BURST))  # not learnt
    assert pace.per_epoch == {32: [100.0]}
    assert pace.slowdown(record(cost=800.0)) == pytest.approx(2.0)
    assert pace.slowdown(record(cost=800.0, epoch_timing=BURST)) == 1.0


def test_the_warning_comes_once_per_run_with_the_fix(caplog):
    warn = BurstWarning()
    caplog.set_level(logging.WARNING, logger="zeus_run.trial.burst")
    warn.check(record())
    assert not caplog.records
    warn.check(record(epoch_timing=BURST, recurrence=2))
    warn.check(dataclasses.replace(record(epoch_timing=BURST), recurrence=3))
    (msg,) = [r.getMessage() for r in caplog.records]
    assert msg.startswith("recurrence 2 try 1 (batch size 32): the script's output reached zeus-run only at exit")
    assert "print(..., flush=True)" in msg and "PYTHONUNBUFFERED=1" in msg and "`stdout: pty`" in msg
