"""The one accounting of a life (`zeus_run.views.nights`): what each kind of night adds to each side."""

from __future__ import annotations

import pytest

from tests.factories import make_record
from zeus_run.views.nights import Kind, charges, sides


def rec(
    trial: int,
    night: int,
    bs: int,
    cost: float,
    epochs: int = 3,
    reason: str = "target_reached",
    cause: str | None = None,
):
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
        cause=cause,
    )


OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


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
        # a launcher killed under a trial is zeus-run's alone: the default's job had no launcher to lose
        ([rec(9, 5, 64, 50.0, 1, "interrupted")], Kind.LOST, 0.0, 0.0),
        ([rec(9, 5, 64, 50.0, 1, "config_error")], Kind.LOST, 0.0, 0.0),  # zeus-run's spec, not the job's
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
    night = [rec(9, 5, 64, 360.0, 3, "max_epochs"), rec(10, 5, 32, 900.0)]  # 2x and 3x their usual pace
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


def test_an_oom_above_the_default_is_zeus_runs_alone_at_or_below_it_both_sides():
    """The one rule for bad nights: an out-of-memory crash hits the default only where it needs no more memory."""
    above = [rec(9, 5, 128, 4.0, 0, "crashed", OOM), rec(10, 5, 64, 180.0)]  # b0 = 64: 128 does not fit, 64 does
    (last,) = charges([*USUAL, *above], 64)[-1:]
    assert last.kind is Kind.REACHED and last.held(lambda r: r.spent_cost) == 0.0
    below = [rec(9, 5, 32, 4.0, 0, "crashed", OOM), rec(10, 5, 32, 300.0)]  # b0 = 64 needs more than 32, which failed
    (last,) = charges([*USUAL, *below], 64)[-1:]
    assert last.kind is Kind.REACHED and last.held(lambda r: r.spent_cost) == pytest.approx(4.0)
    # A night nothing survived: only the tries at or below the default count on its side (no model, no run).
    every = [rec(9, 5, 128, 4.0, 0, "crashed", OOM), rec(10, 5, 64, 3.0, 0, "crashed", OOM)]
    (last,) = charges([*USUAL, *every], 64)[-1:]
    assert last.kind is Kind.FAILED and last.held(lambda r: r.spent_cost) == pytest.approx(3.0)


def test_crashed_partial_tries_are_no_evidence_of_a_slow_machine():
    """Two batch sizes crashed 1.4 epochs in (1 whole epoch read) and a retry reached at its usual pace: not slow."""
    night = [rec(9, 5, 32, 140.0, 1, "crashed"), rec(10, 5, 128, 56.0, 1, "crashed"), rec(11, 5, 64, 180.0)]
    usual = [*USUAL, rec(5, 6, 128, 120.0)]
    (last,) = [n for n in charges([*usual, *night], 64) if n.recurrence == 5]
    assert last.kind is Kind.REACHED and last.default_runs == 1.0 and last.most == 1.0


def test_each_batch_size_gives_its_fastest_try():
    """A batch size that ran slow, then at its usual pace the same night, shows no slow machine."""
    night = [rec(9, 5, 64, 400.0, 3, "max_epochs"), rec(10, 5, 64, 180.0), rec(11, 5, 32, 900.0)]
    (last,) = charges([*USUAL, *night], 64)[-1:]
    assert last.kind is Kind.REACHED and last.default_runs == 1.0
