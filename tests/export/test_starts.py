"""The start plans (spec section ``start``, ``starts.jsonl``) in the report, Prometheus and MLflow; without one,
every export is what it was."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.factories import make_record
from tests.fake_mlflow.store import PATH as FAKE_MLFLOW
from tests.start.helpers import history, iso, stamp
from zeus_run.door.start import record_outcome, record_plan
from zeus_run.export import exposition
from zeus_run.start import Plan, Series
from zeus_run.views.jobs import load_job
from zeus_run.views.report import render_report

T0 = stamp("2026-01-20T00:00:00Z")
HOUR = 3600.0
DAY = 86_400.0


def _plain(tmp_path: Path) -> Path:
    run_dir = tmp_path / "runs" / "t"
    history(run_dir, [HOUR] * 3, T0)
    return run_dir


def _planned(run_dir: Path) -> None:
    """Two triggers: one moved to 03:00 that ran there (1 kWh at 100 g/kWh against 300 on time), one not moved
    that has not run yet."""
    actual = Series([T0 - DAY, T0 + 3 * HOUR, T0 + 5 * HOUR], [300.0, 100.0, 300.0])
    moved = Plan(
        T0,
        T0 + 8 * HOUR,
        T0 + 3 * HOUR,
        True,
        "the forecast promises 67% less",
        duration=HOUR,
        forecast_now=300.0,
        forecast_at_start=100.0,
        provenance="csv:f.csv",
    )
    record_plan(run_dir, moved)
    ran = [make_record(3, job="t", started_at=iso(T0 + 3 * HOUR), ended_at=iso(T0 + 4 * HOUR), energy=3.6e6)]
    assert record_outcome(run_dir, moved, ran, actual) is not None
    later = T0 + DAY
    record_plan(run_dir, Plan(later, later + 8 * HOUR, later, False, "only 3 earlier run(s): starting on time"))


def _samples(text: str) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        if not line.startswith("#"):
            name, labels, value = re.match(r"^([a-z_]+)\{(.*)\} (\S+)$", line).groups()  # type: ignore[union-attr]
            out.setdefault(name, []).append((labels, float(value)))
    return out


def test_without_a_start_section_the_report_and_prometheus_are_unchanged_and_with_one_they_only_add(tmp_path):
    run_dir = _plain(tmp_path)
    before_job = load_job(run_dir)
    assert before_job.starts == ()
    before_prom = exposition([before_job])
    before_html = render_report(before_job)
    assert "zeus_run_start" not in before_prom and "Start plans" not in before_html
    _planned(run_dir)
    after_prom = exposition([load_job(run_dir)])
    kept = "\n".join(
        line for line in after_prom.splitlines() if not re.match(r"^(# (HELP|TYPE) )?zeus_run_start_", line)
    )
    assert kept + "\n" == before_prom  # every earlier line, as it was: the start metrics are added, nothing else
    assert "zeus_run_start_" in after_prom


def test_prometheus_shows_the_last_plan_and_the_carbon_saved(tmp_path):
    run_dir = _plain(tmp_path)
    _planned(run_dir)
    text = exposition([load_job(run_dir)])
    s = _samples(text)
    assert s["zeus_run_start_delay_seconds"][0][1] == 0.0  # the last trigger starts on time
    assert s["zeus_run_start_planned_timestamp_seconds"][0][1] == T0 + DAY
    assert s["zeus_run_start_deadline_timestamp_seconds"][0][1] == T0 + DAY + 8 * HOUR
    assert "zeus_run_start_planned_intensity_g_per_kwh" not in s  # its plan had no forecast
    assert s["zeus_run_start_realized_intensity_g_per_kwh"][0][1] == 100.0
    assert s["zeus_run_start_carbon_saved_grams"][0][1] == pytest.approx(200.0)
    plans = {labels.rsplit("moved=", 1)[1]: v for labels, v in s["zeus_run_start_plans_total"]}
    assert plans == {'"false"': 1.0, '"true"': 1.0}
    for name in s:
        if name.startswith("zeus_run_start_"):
            kind = re.search(rf"^# TYPE {name} (\w+)$", text, re.M)
            assert kind is not None and re.search(rf"^# HELP {name} \S", text, re.M), name
            assert name.endswith("_total") == (kind.group(1) == "counter"), name
            assert all('job_name="t"' in labels and "run_dir=" in labels for labels, _ in s[name]), name


def test_the_report_has_a_row_per_trigger_with_the_plan_and_what_it_saved(tmp_path):
    run_dir = _plain(tmp_path)
    _planned(run_dir)
    html = render_report(load_job(run_dir))
    section = html.split("<h2>Start plans</h2>", 1)[1]
    assert "Carbon saved by shifting starts: +200 g CO2e over 1 measured run(s)" in section
    rows = re.findall(r"<tr>(.*?)</tr>", section)
    assert len(rows) == 3, rows  # the header and two triggers
    first = re.findall(r"<td[^>]*>(.*?)</td>", rows[1])
    assert first[:6] == [
        "2026-01-20T00:00:00Z",
        "2026-01-20T03:00:00Z",
        "3.00 h",
        "300 g/kWh",
        "100 g/kWh",
        "2026-01-20T08:00:00Z",
    ]
    assert first[6].startswith("the forecast promises 67% less (csv:f.csv)")
    assert first[7:] == ["rec 4", "100 g/kWh", "300 g/kWh", "+200 g (+66.7%)"]
    second = re.findall(r"<td[^>]*>(.*?)</td>", rows[2])
    assert second[2] == "0 s" and second[7] == "not run yet" and second[-1] == "-"


def test_mlflow_logs_a_run_per_trigger_and_its_outcome_once_it_lands(tmp_path, monkeypatch):
    import json

    from zeus_run.export import MlflowExporter

    monkeypatch.syspath_prepend(str(FAKE_MLFLOW))
    store = tmp_path / "mlflow-store.json"
    monkeypatch.setenv("FAKE_MLFLOW_STORE", str(store))
    run_dir = _plain(tmp_path)
    exporter = MlflowExporter(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exporter.export([load_job(run_dir)])

    def runs(role: str) -> list[dict]:
        return [r for r in json.loads(store.read_text())["runs"].values() if r["tags"].get("zeus_run.role") == role]

    assert runs("start") == [] and "start_plans" not in runs("job")[0]["metrics"]  # no start section: nothing
    _planned(run_dir)
    exporter.export([load_job(run_dir)])
    exporter.export([load_job(run_dir)])  # again: nothing twice
    starts = {r["tags"]["zeus_run.start_trigger"]: r for r in runs("start")}
    assert sorted(starts) == ["2026-01-20T00:00:00Z", "2026-01-21T00:00:00Z"]
    moved = starts["2026-01-20T00:00:00Z"]
    assert moved["params"]["start_at"] == "2026-01-20T03:00:00Z" and moved["params"]["moved"] == "true"
    assert moved["params"]["recurrences"] == "4" and moved["tags"]["zeus_run.start_outcome"] == "ran"
    assert moved["metrics"]["delay_seconds"] == [[3 * HOUR, 0]]
    assert moved["metrics"]["saved_grams"] == [[pytest.approx(200.0), 0]]
    pending = starts["2026-01-21T00:00:00Z"]
    assert pending["tags"]["zeus_run.start_outcome"] == "pending" and "recurrences" not in pending["params"]
    parent = runs("job")[0]
    assert parent["metrics"]["start_carbon_saved_grams"][-1][0] == pytest.approx(200.0)
    assert parent["metrics"]["start_plans"][-1][0] == 2.0


def test_a_wait_stopped_by_a_signal_is_a_row_that_says_so(tmp_path):
    run_dir = _plain(tmp_path)
    p = Plan(T0, T0 + 8 * HOUR, T0 + 2 * HOUR, True, "waiting for 100 g/kWh", forecast_at_start=100.0)
    record_plan(run_dir, p)
    record_plan(run_dir, p, event="interrupted", signal="SIGTERM", at=iso(T0 + HOUR))
    job = load_job(run_dir)
    assert len(job.starts) == 1 and job.starts[0].interrupted == "SIGTERM" and not job.starts[0].ran
    html = render_report(job)
    assert "stopped by SIGTERM while waiting" in html and "No saving measured yet" in html
    s = _samples(exposition([job]))
    assert s["zeus_run_start_delay_seconds"][0][1] == 2 * HOUR and "zeus_run_start_carbon_saved_grams" not in s
