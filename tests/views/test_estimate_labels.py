"""An estimate whole (no GPU measured) and an estimated part (a start-up a measured trial could not read) are two
things in every view (issue 54, 2): the totals of an ``nvml`` job say how much of them was estimated, never "no GPU
was measured"."""

from __future__ import annotations

from tests.factories import make_record
from zeus_run.cli._render import summary_lines
from zeus_run.views.rows import recurrence_rows
from zeus_run.views.summary import summarize


def _total(lines: list[str]) -> str:
    (line,) = [x for x in lines if x.startswith("Total:")]
    return line


def test_a_measured_job_with_an_estimated_start_up_says_how_much_was_estimated():
    records = [
        make_record(0, energy_source="nvml", estimated=True, estimated_energy=50.0, estimated_share=50.0 / 150.0),
        make_record(1, energy_source="nvml"),
        make_record(2, energy_source="nvml"),
    ]
    s = summarize(records)
    assert not s.estimated and s.estimated_trials == 0 and s.estimated_part == 50.0, s
    total = _total(summary_lines(s))
    assert "no GPU was measured" not in total and "~" not in total, total
    assert "50.0 J of it estimated" in total and "11.1%" in total, total  # 50 of 450 J
    assert not any(row.estimated for row in recurrence_rows(records))


def test_a_job_that_measured_no_gpu_says_so():
    records = [make_record(i, energy_source="estimate", estimated=True) for i in range(3)]
    s = summarize(records)
    assert s.estimated and s.estimated_trials == 3 and s.estimated_part == 0.0, s
    assert "(estimated: no GPU was measured)" in _total(summary_lines(s))


def test_a_job_with_both_names_each():
    records = [
        make_record(0, energy_source="estimate", estimated=True),
        make_record(1, energy_source="nvml", estimated=True, estimated_energy=30.0),
    ]
    total = _total(summary_lines(summarize(records)))
    assert "1 of 2 trials measured no GPU" in total and "30.0 J of it estimated" in total, total
