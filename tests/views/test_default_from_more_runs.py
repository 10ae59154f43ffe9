"""The default's cost from more than one lucky run (issue 53, item 1): its pace is also read from the other batch
sizes' runs (`zeus_run.views.pace`), and a control run of it (`zeus_run.engine.control`) narrows what only its own
runs can tell (its epochs)."""

from __future__ import annotations

import math

import pytest

from tests.conftest import TRACES
from tests.factories import make_record
from zeus_run.engine.control import STAGE, control
from zeus_run.sim import JOBS, Life, job_table, load_traces, simulate
from zeus_run.views.evidence import Evidence
from zeus_run.views.summary import summarize

#: The job's truth: epochs to the target and seconds per epoch per batch size (pace ~ bs^-0.45).
EPOCHS = {16: 6, 32: 5, 64: 4, 128: 4, 256: 3}
NOISE = (1.0, 1.04, 0.97, 1.02, 0.98, 1.03, 0.96, 1.01)


def pace(bs: int) -> float:
    return 4.0 * (bs / 32) ** -0.45


def run(trial: int, bs: int, luck: float, stage: str = "thompson"):
    cost = EPOCHS[bs] * pace(bs) * luck
    return make_record(
        trial, batch_size=bs, epochs=EPOCHS[bs], cost=cost, energy=cost, time=cost, max_power=1.0, stage=stage
    )


def lucky_life(others_each: int):
    """The default (32) ran once, 12% faster than its pace; every other batch size ran ``others_each`` times."""
    records = [run(0, 32, 0.88, "pruning")]
    for bs in (16, 64, 128, 256):
        for i in range(others_each):
            records.append(run(len(records), bs, NOISE[(i + bs) % len(NOISE)]))
    return records


def test_a_lucky_default_run_moves_toward_its_truth_as_the_other_batch_sizes_run():
    truth = EPOCHS[32] * pace(32)
    records = lucky_life(4)
    alone = Evidence.of(records[:1] + [r for r in records if r.batch_size == 64], 32)  # too few to check a line
    assert alone.pace is None and alone.default_mean("cost") == pytest.approx(0.88 * truth)
    ev = Evidence.of(records, 32)
    assert ev.pace is not None and ev.pace.batch_sizes == (16, 64, 128, 256)
    # The line through 16, 64, 128 and 256 puts the default's pace near its truth: the lucky run counts for less.
    assert abs(ev.default_mean("cost") / truth - 1) < 0.5 * abs(0.88 - 1)
    # ... and the pace's share of the default's variance shrinks; the epochs' (its rounding) stays over its one run.
    old = ev.spread.of_default("cost") / math.sqrt(1)
    assert ev.default_se("cost") < old
    assert ev.default_se("cost") >= ev.spread.rounding  # one run of 5 epochs: known to 1/(2 x 5) at best
    more = Evidence.of(lucky_life(8), 32)
    assert more.pace is not None and more.default_se("cost") <= ev.default_se("cost") + 1e-12


def test_history_says_what_the_saving_rests_on():
    s = summarize(lucky_life(4), 32)
    assert s.baseline is not None
    assert (
        s.baseline.rests_on
        == "the default ran once; its pace is also read from 16's, 64's, 128's and 256's runs"
        + (f" (weighing {s.baseline.pace_weight * 100:.0f}%)")
    )
    assert 0 < s.baseline.pace_weight < 1


def test_a_control_runs_while_the_saving_is_too_wide_and_only_within_its_share():
    records = lucky_life(4)
    assert control(records, 32, None, 20) is None  # saving.control: null
    assert control(records[:5], 32, 0.05, 20) is None  # exploring still (no try past pruning of another stage)
    spent = sum(r.spent_cost for r in records)
    why = control(records, 32, 0.5, 20)
    assert why is not None and "rests on 1 run" in why
    # The control's extra (the default's cost beyond the cheapest batch size's) must fit within the share.
    cheapest = min(EPOCHS[b] * pace(b) for b in (16, 64, 128, 256))
    share = (0.88 * EPOCHS[32] * pace(32) - cheapest) / (spent + 0.88 * EPOCHS[32] * pace(32))
    assert control(records, 32, share * 0.9, 20) is None
    assert control(records, 32, share * 1.1, 20) is not None
    assert control(records, 32, 0.5, 0) is None  # no recurrence left


def test_a_simulated_life_runs_controls_within_their_share_and_replays_exactly():
    from zeus_run.engine.replay import audit

    table = job_table(load_traces(TRACES / "summary_train.csv", TRACES / "summary_power_v100.csv"), JOBS["imagenet"])
    r = simulate(table, seed=3, horizon=30, baselines=False, life=Life(), control=0.05)
    controls = [x for x in r.records if x.stage == STAGE]
    assert controls, "no control ran in 30 recurrences of a default that ran once"
    assert all(x.batch_size == table.default_batch_size for x in controls)
    assert audit(r.records, r.knobs).divergence is None
    quiet = simulate(table, seed=3, horizon=30, baselines=False, life=Life())
    assert not [x for x in quiet.records if x.stage == STAGE]  # none without saving.control


def test_a_control_run_is_out_of_the_steady_state_and_in_the_default():
    records = lucky_life(4)
    records.append(run(len(records), 32, 1.0, STAGE))
    s = summarize(records, 32)
    assert s.steady is not None and 32 not in s.steady.batch_sizes
    assert s.baseline is not None and (s.baseline.runs, s.baseline.controls) == (2, 1)
    assert s.baseline.rests_on.startswith("the default ran 2 times (1 as control); its pace is also read from")
