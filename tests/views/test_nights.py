"""The one accounting of a life (`zeus_run.views.nights`): what each kind of night adds to each side."""

from __future__ import annotations

import pytest

from tests.factories import make_record
from zeus_run.views.nights import Kind, charges, sides


def rec(trial: int, night: int, bs: int, cost: float, epochs: int = 3, reason: str = "target_reached"):
    return make_record(
        trial,
        recurrence=night,
        batch_size=bs,
        cost=cost,
        energy=cost,
        time=cost / 100,
        epochs=epochs,
        stop_reason=reason,
        reached=reason == "target_reached",
        observed=reason not in ("interrupted", "infrastructure", "environment_error", "config_error"),
    )


#: Nights 1-4: batch sizes 32 and 64 converge at their usual pace (100 J and 60 J an epoch, 3 epochs).
USUAL = [rec(0, 1, 32, 300.0), rec(1, 2, 64, 180.0), rec(2, 3, 32, 300.0), rec(3, 4, 64, 180.0)]


@pytest.mark.parametrize(
    ("night", "kind", "default_runs", "held"),
    [
        # (the night's tries, its kind, the default runs its side holds, what else it holds as it ran: J)
        ([rec(9, 5, 64, 180.0)], Kind.REACHED, 1.0, 0.0),
        ([rec(9, 5, 64, 5.0, 0, "infrastructure"), rec(10, 5, 64, 180.0)], Kind.REACHED, 1.0, 5.0),
        # b0 (64) crashed once at 3 J, the night tried twice: the default's job would have too (6 J, at most 7)
        ([rec(9, 5, 64, 3.0, 0, "crashed"), rec(10, 5, 128, 4.0, 0, "crashed")], Kind.FAILED, 0.0, 6.0),
        ([rec(9, 5, 64, 5.0, 0, "crashed"), rec(10, 5, 128, 4.0, 0, "crashed")], Kind.FAILED, 0.0, 9.0),
        ([rec(9, 5, 128, 4.0, 0, "crashed")], Kind.FAILED, 0.0, 0.0),  # the default never ran: nothing known
        ([rec(9, 5, 64, 50.0, 1, "interrupted")], Kind.LOST, 0.0, 50.0),
        ([rec(9, 5, 64, 50.0, 1, "environment_error")], Kind.LOST, 0.0, 50.0),
    ],
)
def test_each_kind_of_night(night, kind, default_runs, held):
    (last,) = charges([*USUAL, *night], 64)[-1:]
    assert (last.kind, last.default_runs, len(last.records)) == (kind, default_runs, len(night))
    assert last.held(lambda r: r.spent_cost) == pytest.approx(held)


def test_one_slow_try_is_no_evidence_but_widens_what_the_default_may_hold():
    (last,) = charges([*USUAL, rec(9, 5, 64, 540.0)], 64)[-1:]  # 64 ran 3x its usual pace
    assert last.kind is Kind.REACHED and last.default_runs == 1.0 and last.most == pytest.approx(3.0)


def test_two_batch_sizes_slow_charge_the_lesser_of_a_ratio_and_a_stall():
    night = [rec(9, 5, 64, 360.0, 3, "cost_threshold"), rec(10, 5, 32, 900.0)]  # 2x and 3x their usual pace
    (last,) = charges([*USUAL, *night], 64)[-1:]
    assert last.kind is Kind.SLOW and last.slowdown == pytest.approx(2.0)
    # As a stall, 64's try cost 180 J beyond its pace: a default run of 1,000 J would cost 1.18x, not 2x.
    (stalled,) = charges([*USUAL, *night], 64, default_cost=1000.0)[-1:]
    assert stalled.default_runs == pytest.approx(1.18)


def test_sides_sum_every_try_and_the_default_runs():
    nights = charges([*USUAL, rec(9, 5, 64, 5.0, 0, "crashed"), rec(10, 5, 128, 4.0, 0, "crashed")], 64)
    side = sides(nights, "cost")
    assert side.spent == pytest.approx(300 + 180 + 300 + 180 + 5 + 4)
    # The failed night: no run; b0's try twice (as often as the night tried), at most what the night spent.
    assert side.certain == pytest.approx(9.0) and side.runs == 4.0
