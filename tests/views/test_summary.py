"""The statistics behind `zeus-run history`: tables of records in, figures out."""

from __future__ import annotations

import math

import pytest

from tests.factories import make_record
from zeus_run.records import TrialRecord
from zeus_run.views.evidence import Evidence
from zeus_run.views.summary import (
    batch_size_stats,
    exploration_status,
    failure_reason,
    recommend,
    recurrence_rows,
    steady_state,
    summarize,
)


def rec(i: int, bs: int, cost: float, reached: bool = True, stage: str = "thompson", **kw) -> TrialRecord:
    """Recurrence ``i``'s only trial, costing ``cost`` J (10 J an epoch, 100 W)."""
    shape = dict(epochs=int(cost // 10), time=cost / 100, energy=cost, cost=cost)
    return make_record(
        kw.pop("trial", i - 1), recurrence=i, batch_size=bs, stage=stage, reached=reached, **{**shape, **kw}
    )


def history(rows):
    """(recurrence, batch size, cost, reached, stage) rows -> records, attempts and trial numbers filled in."""
    out = []
    attempts: dict[int, int] = {}
    for i, (r, bs, cost, reached, stage) in enumerate(rows):
        attempts[r] = attempts.get(r, 0) + 1
        out.append(rec(r, bs, cost, reached, stage, attempt=attempts[r], trial=i))
    return out


# A job whose default (512) costs 100 per run, and 256 costs 57 once found.
EXPLORING = [
    (1, 512, 100.0, True, "pruning"),
    (2, 256, 57.0, True, "pruning"),
    (3, 128, 80.0, True, "pruning"),
    (4, 64, 300.0, False, "pruning"),
    (4, 1024, 150.0, True, "pruning"),
]
SETTLED = [
    *EXPLORING,
    (5, 512, 100.0, True, "pruning"),
    (6, 256, 57.0, True, "pruning"),
    (7, 128, 82.0, True, "thompson"),
    (8, 256, 56.0, True, "thompson"),
    (9, 256, 58.0, True, "thompson"),
    (10, 256, 57.0, True, "thompson"),
    (11, 256, 57.0, True, "thompson"),
    (12, 256, 57.0, True, "thompson"),
]


def test_per_batch_size_table():
    stats = {s.batch_size: s for s in batch_size_stats(history(SETTLED))}
    assert sorted(stats) == [64, 128, 256, 512, 1024]
    s256 = stats[256]
    assert (s256.trials, s256.converged) == (7, 7)
    assert s256.mean_cost == pytest.approx(57.0)
    costs = [57.0, 57.0, 56.0, 58.0, 57.0, 57.0, 57.0]
    m = sum(costs) / 7
    assert s256.std_cost == pytest.approx(math.sqrt(sum((c - m) ** 2 for c in costs) / 6))
    assert s256.mean_time == pytest.approx(0.57) and s256.mean_energy == pytest.approx(57.0)
    assert (stats[64].trials, stats[64].converged, stats[64].mean_cost, stats[64].std_cost) == (1, 0, None, None)
    assert stats[1024].std_cost is None  # one run: no spread


def test_exploration_still_going_is_reported():
    x = exploration_status(history(EXPLORING))
    assert x.exploring and x.stage == "pruning" and x.ended_after is None and x.recurrences == 4
    s = summarize(history(EXPLORING), 512)
    assert s.steady is None
    assert s.exploration is not None and s.exploration.exploring


def test_exploration_over_and_steady_state_against_the_default():
    s = summarize(history(SETTLED), 512)
    assert s.exploration is not None and not s.exploration.exploring
    assert s.exploration.ended_after == 6
    st = s.steady
    assert st is not None
    assert (st.recurrences, st.first, st.last) == (5, 8, 12)
    # A recurrence now costs 256's mean over all its converged runs, not the luck of the last five.
    assert st.mean_cost == pytest.approx((57 + 57 + 56 + 58 + 57 + 57 + 57) / 7)
    # Against the default's mean (its pace also read from the other batch sizes': `zeus_run.views.pace`).
    assert s.default_mean_cost == pytest.approx(100.0, rel=1e-3)
    assert st.savings == pytest.approx(1 - st.mean_cost / s.default_mean_cost)
    assert st.savings_ci is not None and st.savings_ci[0] < st.savings < st.savings_ci[1]
    # The whole-history figure is dragged down by exploration; the steady state is not.
    assert s.savings_cost is not None and s.savings_cost < st.savings - 0.1


def test_steady_window_is_the_last_k_after_exploration():
    rows = recurrence_rows(history(SETTLED))
    x = exploration_status(history(SETTLED))
    evidence = Evidence.of(history(SETTLED), 512)
    st = steady_state(rows, x, evidence, window=2)
    assert st is not None and (st.first, st.last, st.batch_sizes) == (11, 12, (256, 256))
    assert st.savings == pytest.approx(1 - 57.0 / evidence.default_mean("cost"))  # its pace also read from others'
    without = steady_state(rows, x, None, window=2)
    assert without is not None and without.savings is None and without.mean_cost == pytest.approx(57.0)


def test_default_mean_rests_on_its_runs():
    s = summarize(history(SETTLED), 512)
    # Its two runs at 100 J, its pace also read from 128's, 256's and 1024's (`zeus_run.views.pace`).
    assert s.default_runs == 2 and s.default_mean_cost == pytest.approx(100.0, rel=1e-3)
    s1 = summarize(history(EXPLORING), 512)
    assert s1.default_runs == 1
    none = summarize(history(EXPLORING), 64)  # 64 never converged
    assert none.default_runs == 0 and none.default_mean_cost is None and none.savings_cost is None


def test_recommendation_names_batch_size_learning_rate_and_power_limit():
    recs = [
        rec(1, 512, 100.0, learning_rate=0.1, power_limit=300.0),
        rec(2, 256, 60.0, learning_rate=0.0707, power_limit=250.0),
        rec(3, 256, 62.0, learning_rate=0.0707, power_limit=225.0),
        rec(4, 128, 40.0, learning_rate=0.05, power_limit=200.0),  # one lucky run
    ]
    r = recommend(batch_size_stats(recs), 100.0)
    assert r is not None
    assert (r.batch_size, r.learning_rate, r.power_limit, r.runs) == (256, 0.0707, 225.0, 2)
    assert r.mean_cost == pytest.approx(61.0) and r.savings == pytest.approx(0.39)
    # With one run each, the cheapest wins.
    r1 = recommend(batch_size_stats(recs[:2] + recs[3:]), None)
    assert r1 is not None and r1.batch_size == 128 and r1.savings is None
    assert recommend(batch_size_stats([rec(1, 64, 10.0, reached=False)]), None) is None


@pytest.mark.parametrize(
    ("message", "exit_code", "expected"),
    [
        (
            'exit code 1; last output:\nloading\nTraceback (most recent call last):\n  File "t.py", line 3\n'
            "    x = model(batch)\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
            1,
            "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ),
        (
            "exit code 1; last output:\ntorch.OutOfMemoryError: CUDA out of memory.\nwandb: syncing run\n",
            1,
            "torch.OutOfMemoryError: CUDA out of memory.",
        ),
        ("exit code 3; last output:\nepoch 1 done\nboom at epoch 2", 3, "boom at epoch 2"),
        ("exit code -9; last output:\n", -9, "killed by SIGKILL"),
        ("exit code 2; last output:\n(no log)", 2, "exit code 2"),
        (None, 137, "exit code 137"),
    ],
)
def test_failure_reason_is_the_last_error_line(message, exit_code, expected):
    r = rec(1, 64, 10.0, reached=False, stop_reason="crashed", message=message, exit_code=exit_code)
    assert failure_reason(r) == expected


def test_failure_reason_of_other_outcomes():
    assert failure_reason(rec(1, 64, 10.0)) is None
    assert failure_reason(rec(1, 64, 10.0, reached=False)) is None  # max_epochs is not a failure with a cause
    t = rec(1, 64, 10.0, reached=False, stop_reason="timeout", message="no result within the 60 s timeout")
    assert failure_reason(t) == "no result within the 60 s timeout"


def test_recurrence_rows_carry_reasons_and_power_limits():
    crash = rec(
        1,
        1024,
        5.0,
        reached=False,
        stop_reason="crashed",
        exit_code=1,
        message="exit code 1; last output:\nRuntimeError: CUDA out of memory",
    )
    ok = rec(1, 512, 50.0, attempt=2, trial=1, power_limit=250.0)
    (row,) = recurrence_rows([crash, ok])
    assert row.outcomes == ("crashed", "target_reached")
    assert row.reasons == ("RuntimeError: CUDA out of memory", None)
    assert row.power_limit == 250.0 and row.cost == pytest.approx(55.0)


def test_summary_is_json_ready():
    import json

    from zeus_run.cli._render import summary_json

    s = summarize(history(SETTLED), 512)
    data = json.loads(json.dumps(summary_json(s), allow_nan=False))
    assert data["steady"]["recurrences"] == 5 and data["recommendation"]["batch_size"] == 256
    assert data["default_runs"] == 2 and len(data["by_batch_size"]) == 5
