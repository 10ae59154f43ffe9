"""The record of each trigger (``starts.jsonl``): the plan, then the intensity that happened and the carbon saved
against starting on time, measured on the series; ``history`` shows them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.factories import make_record, zeus_run_cli
from tests.start.helpers import history, iso, stamp
from zeus_run.door.start import read_starts, record_outcome, record_plan, start_lines
from zeus_run.start import Plan, Series


def test_the_outcome_is_measured_on_the_series_against_the_same_run_started_on_time(tmp_path: Path) -> None:
    t0 = stamp("2026-01-20T00:00:00Z")
    actual = Series([t0, t0 + 3 * 3600, t0 + 5 * 3600], [300.0, 100.0, 300.0])
    p = Plan(t0, t0 + 8 * 3600, t0 + 3 * 3600, True, "waiting for 100 g/kWh", duration=3600.0)
    record_plan(tmp_path, p)
    ran = [make_record(0, started_at=iso(t0 + 3 * 3600), ended_at=iso(t0 + 4 * 3600), energy=3.6e6, time=3600.0)]
    out = record_outcome(tmp_path, p, ran, actual)
    assert out is not None and out["deadline_met"] is True
    assert out["intensity"] == 100.0 and out["on_time_intensity"] == 300.0
    assert out["carbon_g"] == pytest.approx(100.0) and out["saved_g"] == pytest.approx(200.0)
    assert [e["event"] for e in read_starts(tmp_path)] == ["plan", "outcome"]
    lines = start_lines(tmp_path)
    assert any("start 2026-01-20T03:00:00Z, due 2026-01-20T08:00:00Z" in line for line in lines)
    assert any("100.0 g/kWh over the run against 300.0 on time" in line and "(+66.7%)" in line for line in lines)


def test_history_shows_the_plans(tmp_path: Path) -> None:
    t0 = stamp("2026-01-20T00:00:00Z")
    run_dir = tmp_path / "runs"
    history(run_dir, [3600.0] * 2, t0)
    record_plan(run_dir, Plan(t0, t0 + 8 * 3600, t0, False, "no forecast (start.forecast: none): starting on time"))
    result = zeus_run_cli("history", run_dir)
    assert result.returncode == 0, result.stderr
    assert "Start plans" in result.stdout and "no forecast (start.forecast: none)" in result.stdout
