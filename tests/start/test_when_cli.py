"""``zeus-run when``: the planned start for a scheduler, as text and JSON; a deadline already missed; no section."""

from __future__ import annotations

import json
from pathlib import Path

from tests.factories import job_spec, zeus_run_cli
from tests.start.helpers import DAY, daily, history, stamp, write_csv

TRIGGER = "2026-01-20T00:00:00Z"


def _job(tmp_path: Path, runs: int = 6, start: str = '{by: "08:00", forecast: {csv: grid.csv}}') -> Path:
    t0 = stamp(TRIGGER)
    times, values = daily(
        t0 - 20 * DAY, t0 + 2 * DAY, lambda t: 100.0 if 4 * 3600 <= (t - t0) % DAY < 6 * 3600 else 300.0
    )
    write_csv(tmp_path / "grid.csv", times, values)
    history(tmp_path / "runs", [3600.0] * runs, t0)
    path = tmp_path / "job.yaml"
    path.write_text(job_spec(f"start: {start}\n", recurrences=None))
    return path


def test_when_prints_the_clean_start_with_its_forecast_duration_deadline_and_provenance(tmp_path: Path) -> None:
    job = _job(tmp_path)
    result = zeus_run_cli("when", job, "--trigger", TRIGGER, "--now", TRIGGER, "--format", "json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["status"] == "wait" and plan["moved"] is True
    assert plan["start_at"] == "2026-01-20T04:00:00Z" and plan["deadline"] == "2026-01-20T08:00:00Z"
    assert plan["forecast_now"] == 300.0 and plan["forecast_at_start"] == 100.0
    assert plan["planned_duration_s"] >= 3600.0 and plan["provenance"] == "csv:grid.csv"
    assert plan["wait_s"] == 4 * 3600
    text = zeus_run_cli("when", job, "--trigger", TRIGGER, "--now", TRIGGER)
    assert text.returncode == 0, text.stderr
    assert "start_at: 04:00" in text.stdout and "deadline: 08:00" in text.stdout and "csv:grid.csv" in text.stdout


def test_too_little_history_says_start_now_and_why(tmp_path: Path) -> None:
    result = zeus_run_cli("when", _job(tmp_path, runs=2), "--trigger", TRIGGER, "--now", TRIGGER, "--format", "json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["status"] == "start" and plan["start_at"] == TRIGGER and "only 2 earlier run(s)" in plan["reason"]


def test_a_deadline_already_missed_is_a_clear_message(tmp_path: Path) -> None:
    job = _job(tmp_path)
    result = zeus_run_cli("when", job, "--trigger", TRIGGER, "--now", "2026-01-20T09:00:00Z")
    assert result.returncode == 1
    assert "deadline 2026-01-20T08:00:00Z" in result.stderr and "has passed" in result.stderr
    assert "Traceback" not in result.stderr
    late = zeus_run_cli("when", job, "--trigger", TRIGGER, "--now", "2026-01-20T05:00:00Z", "--format", "json")
    assert late.returncode == 0 and json.loads(late.stdout)["status"] == "start"  # 04:00 has passed: start now


def test_a_job_without_a_start_section_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(job_spec())
    result = zeus_run_cli("when", path)
    assert result.returncode == 2 and "no start section" in result.stderr


def test_ask_says_when_to_start_as_when_plans_it_and_nothing_without_a_start_section(tmp_path: Path) -> None:
    from zeus_run.door.start import job_of, plan_trigger
    from zeus_run.start import iso

    path = tmp_path / "job.yaml"
    path.write_text(job_spec("start: {within: 8h, forecast: none}\n", recurrences=None))
    asked = zeus_run_cli("ask", path, "--format", "json")
    assert asked.returncode == 0, asked.stderr
    start = json.loads(asked.stdout)["start"]
    spec, _, records = job_of(path)
    p = plan_trigger(spec, records, stamp(start["trigger"]))
    assert (start["start_at"], start["deadline"], start["reason"]) == (iso(p.start_at), iso(p.deadline), p.reason)
    assert start["start_in_s"] == 0.0 and start["moved"] is False and "start.forecast is none" in start["reason"]
    env = zeus_run_cli("ask", path, "--format", "env", "--run-dir", tmp_path / "other")
    assert env.returncode == 0, env.stderr
    assert "export ZEUS_START_AT=" in env.stdout and "export ZEUS_START_IN_S=0" in env.stdout
    plain = tmp_path / "plain.yaml"
    plain.write_text(job_spec(recurrences=None))
    for fmt in ("json", "env"):
        out = zeus_run_cli("ask", plain, "--format", fmt, "--run-dir", tmp_path / f"plain-{fmt}")
        assert out.returncode == 0, out.stderr
        assert "ZEUS_START" not in out.stdout and '"start"' not in out.stdout
