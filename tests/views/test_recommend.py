"""Recommendations that agree with the data (`zeus_run.views.recommend`, `zeus_run.views.summary`, the history view)."""

from __future__ import annotations

import pytest

from tests.views.test_summary import rec
from zeus_run.cli._render import history_table, summary_lines
from zeus_run.views.recommend import Belief, recommend
from zeus_run.views.summary import batch_size_stats, recurrence_rows, summarize


def test_never_recommends_a_batch_size_worse_than_the_default():
    # 128 has the lowest mean among batch sizes with two runs... but the default (one run) is cheaper still.
    recs = [rec(1, 256, 180.0), rec(2, 128, 188.0), rec(3, 128, 189.6)]
    r = recommend(batch_size_stats(recs), 180.0, 256)
    assert r is not None and r.batch_size == 256 and r.savings == pytest.approx(0.0)
    assert r.note is not None and "above the default's" in r.note
    cheaper = recommend(batch_size_stats([*recs, rec(4, 64, 150.0), rec(5, 64, 152.0)]), 180.0, 256)
    assert cheaper is not None and cheaper.batch_size == 64 and cheaper.note is None


def test_says_why_the_optimizer_favours_another_batch_size():
    recs = [rec(1, 256, 100.0), rec(2, 256, 102.0), rec(3, 512, 90.0), rec(4, 512, 91.0)]
    agree = recommend(batch_size_stats(recs), 101.0, 256, belief=512)
    assert agree is not None and agree.batch_size == 512 and agree.note is None
    differ = recommend(batch_size_stats(recs), 101.0, 256, belief=256)
    assert differ is not None and differ.batch_size == 512
    assert differ.note is not None and "the optimizer now favours batch size 256" in differ.note
    s = summarize([*recs, rec(5, 512, 90.5)], 256, belief=Belief(256, {3: 2.1}))
    text = "\n".join(summary_lines(s, ascii_only=True))
    assert "the optimizer now favours batch size 256" in text
    assert "Slow recurrences" in text and "3 (2.1x; the default charged 1.0x)" in text


def test_a_default_that_rests_on_one_run_gives_every_saving_a_wider_interval():
    recs = [rec(1, 256, 100.0, stage="pruning"), rec(2, 512, 80.0, stage="pruning")]
    recs += [rec(i, 512, 80.0 + i) for i in range(3, 9)]
    s = summarize(recs, 256)
    assert s.default_runs == 1
    lines = [ln for ln in summary_lines(s, ascii_only=True) if "% saved" in ln or "% more" in ln]
    assert len(lines) >= 3  # steady state, whole history, recommendation
    assert all("90% interval" in ln for ln in lines)
    two = summarize([rec(1, 256, 100.0, stage="pruning"), *recs[1:], rec(9, 256, 101.0)], 256)
    one, both = s.saved["cost"], two.saved["cost"]
    assert one is not None and both is not None and one.ci is not None and both.ci is not None
    assert one.ci[1] - one.ci[0] > both.ci[1] - both.ci[0]  # a second run of the default narrows it


def test_the_stage_of_a_recurrence_is_its_first_trys():
    recs = [
        rec(1, 256, 100.0, stage="pruning"),
        rec(2, 128, 300.0, reached=False, stage="pruning", stop_reason="cost_threshold"),
        rec(2, 256, 100.0, attempt=2, trial=2, stage="fallback"),
        rec(3, 256, 100.0, trial=3, stage="thompson"),
    ]
    rows = recurrence_rows(recs)
    assert [r.stage for r in rows] == ["pruning", "pruning", "thompson"]
    table = history_table(recs, "t")
    stage = [name for name, _ in table.columns].index("stage")
    assert [row[stage] for row in table.rows] == ["pruning", "pruning", "thompson"]  # not the fallback's


def test_steady_state_leaves_out_slow_recurrences():
    recs = [rec(1, 256, 100.0, stage="pruning"), rec(2, 256, 100.0)]
    recs += [rec(i, 256, 250.0 if i in (5, 6) else 100.0) for i in range(3, 9)]
    loaded = summarize(recs, 256)
    assert loaded.steady is not None and loaded.steady.mean_cost > 100.0
    s = summarize(recs, 256, belief=Belief(256, {5: 2.5, 6: 2.5}))
    assert s.steady is not None and s.steady.mean_cost == pytest.approx(100.0) and s.steady.skipped == 2
