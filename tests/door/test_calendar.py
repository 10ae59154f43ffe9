"""Which night a taken-over recurrence belongs to (`zeus_run.door.calendar`): the job's slot, and what is carried."""

from __future__ import annotations

import datetime

import pytest

from tests.factories import job_spec, make_record
from zeus_run.door.calendar import DEFAULT_SLOT_S, carried, slot_s
from zeus_run.spec import parse_spec

T0 = datetime.datetime(2026, 3, 1, 2, 0, tzinfo=datetime.timezone.utc)
HOUR = 3600.0


def _iso(seconds: float) -> str:
    return (T0 + datetime.timedelta(seconds=seconds)).isoformat()


def _nights(every_s: float, n: int, tries: int = 1) -> list:
    """``n`` recurrences triggered every ``every_s`` from T0, each with ``tries`` tries a minute apart."""
    out = []
    for k in range(n):
        for a in range(tries):
            out.append(
                make_record(
                    trial=len(out),
                    recurrence=k + 1,
                    attempt=a + 1,
                    triggered_at=_iso(k * every_s),
                    started_at=_iso(k * every_s + 60 * a),
                )
            )
    return out


SPEC = parse_spec(job_spec())


def test_the_slot_is_the_median_gap_between_recurrence_starts_once_three_gaps_show_it():
    assert slot_s(SPEC, _nights(6 * HOUR, 3)) == DEFAULT_SLOT_S  # two gaps: not trusted yet
    assert slot_s(SPEC, _nights(6 * HOUR, 4, tries=3)) == pytest.approx(6 * HOUR)  # a recurrence's retries: its start
    odd = _nights(HOUR, 5)  # one late trigger does not move the median
    odd[-1] = make_record(trial=4, recurrence=5, triggered_at=_iso(20 * HOUR), started_at=_iso(20 * HOUR))
    assert slot_s(SPEC, odd) == pytest.approx(HOUR)


def test_a_daily_deadline_makes_the_slot_a_day_whatever_the_history():
    spec = parse_spec(job_spec('start: {by: "07:00"}\n'))
    assert slot_s(spec, _nights(HOUR, 6)) == DEFAULT_SLOT_S == 86_400.0


def test_a_recurrence_started_tonight_is_not_carried_one_started_a_night_ago_is():
    history = _nights(24 * HOUR, 4)  # nightly at 02:00
    dead = _iso(4 * 24 * HOUR)  # night 5's launcher died at 02:00
    # The same night, re-triggered at 03:00 or at 13:59: that night's; at 14:01 or the next 02:00: carried.
    assert carried(SPEC, history, [(5, dead)], T0.timestamp() + 4 * 24 * HOUR + HOUR) == 0
    assert carried(SPEC, history, [(5, dead)], T0.timestamp() + 4 * 24 * HOUR + 12 * HOUR - 60) == 0
    assert carried(SPEC, history, [(5, dead)], T0.timestamp() + 4 * 24 * HOUR + 12 * HOUR + 60) == 1
    assert carried(SPEC, history, [(5, dead)], T0.timestamp() + 5 * 24 * HOUR) == 1


def test_an_hourly_job_carries_after_half_an_hour_and_a_recurrence_given_twice_counts_once():
    history = _nights(HOUR, 4)
    now = T0.timestamp() + 4 * HOUR + 40 * 60  # 40 minutes after recurrence 5's first start
    taken = [(5, _iso(4 * HOUR)), (5, _iso(4 * HOUR + 30 * 60)), (6, _iso(4 * HOUR + 35 * 60))]
    assert carried(SPEC, history, taken, now) == 1  # 5 (from its earliest start), not 6 (5 minutes ago)


def test_nothing_taken_over_or_no_start_known_carries_nothing():
    history = _nights(HOUR, 4)
    assert carried(SPEC, history, [], T0.timestamp() + 9 * HOUR) == 0
    assert carried(SPEC, history, [(5, None), (6, "not a time")], T0.timestamp() + 9 * HOUR) == 0
