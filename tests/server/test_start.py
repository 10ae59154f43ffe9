"""An ask of a job with a ``start`` section answers when to start, as `zeus-run when` plans it; without one the
answer has no ``start``."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from tests.server.test_security import raw
from tests.start.helpers import daily, history, stamp, write_csv
from zeus_run.door.start import job_of_dir, plan_trigger
from zeus_run.remote import PlannedStart
from zeus_run.rundir.opener import stored_spec

HOUR = 3600.0
DAY = 86_400.0
SPEC = {
    "name": "t",
    "command": ["python", "train.py", "--bs", "{batch_size}"],
    "batch_sizes": [2, 4],
    "default_batch_size": 2,
    "target_metric": 0.9,
    "recurrences": None,
    "energy": {"source": "estimate", "watts": 100, "basis": "wall-time"},
}


def _clean_hours(now: float):
    """300 g/kWh, but 100 in the two hours that begin 3 h after ``now``'s hour, every day."""
    first = (int(now // HOUR) + 3) % 24

    def value(t: float) -> float:
        return 100.0 if (dt.datetime.fromtimestamp(t, dt.timezone.utc).hour - first) % 24 < 2 else 300.0

    return value


def _answer_start(server, job: str) -> dict | None:
    status, body = raw(server, "POST", f"/v1/jobs/{job}/trials", b"{}")
    assert status == 200, body
    return body.get("start")


def test_an_ask_of_a_job_with_a_start_section_answers_the_plan_zeus_run_when_makes(server):
    now = time.time()
    job_dir = server.root / "t"
    job_dir.mkdir(parents=True)
    write_csv(job_dir / "grid.csv", *daily(now - 21 * DAY, now + 2 * DAY, _clean_hours(now)))
    spec = {
        **SPEC,
        "accounting": {"carbon_g_per_kwh": "grid.csv"},
        "start": {"within": "12h", "forecast": "persistence"},
    }
    assert server.client().register("t", spec)["created"]
    history(job_dir, [HOUR] * 6, now)  # six runs of an hour at batch size 2: enough to size the window
    start = _answer_start(server, "t")
    assert start is not None
    trigger = stamp(start["trigger"])
    p = plan_trigger(stored_spec(job_dir), job_of_dir(job_dir), trigger)
    assert p.moved, p.reason  # the clean hours are in the window, and the forecast kept its promises
    assert (stamp(start["start_at"]), stamp(start["deadline"])) == (round(p.start_at), round(p.deadline))
    assert start["moved"] is True and start["reason"] == p.reason and start["status"] == "wait"
    assert start["start_in_s"] == pytest.approx(p.start_at - trigger, abs=2.0)
    assert 2 * HOUR < start["start_in_s"] < 4 * HOUR
    planned = PlannedStart.of({"start": start})  # the Python client's view of it
    assert planned is not None and planned.start_at == stamp(start["start_at"]) and planned.moved


def test_an_ask_of_a_job_without_a_start_section_has_no_start(server):
    assert server.client().register("t", SPEC)["created"]
    status, body = raw(server, "POST", "/v1/jobs/t/trials", b"{}")
    assert status == 200 and "start" not in body and "batch_size" in body
    assert PlannedStart.of(body) is None


def test_a_forecast_csv_outside_the_job_is_refused_at_registration(server, tmp_path):
    (tmp_path / "forecast.csv").write_text("2026-01-01T00:00:00Z,300\n")
    spec = {**SPEC, "start": {"within": "8h", "forecast": {"csv": str(tmp_path / "forecast.csv")}}}
    status, body = raw(server, "PUT", "/v1/jobs/t", json.dumps({"spec": spec}).encode())
    assert (status, body["code"], body["field"]) == (422, "path_not_allowed", "body.spec.start.forecast.csv"), body


def test_a_plan_that_cannot_be_made_starts_now_and_says_why_without_failing_the_ask(server):
    job_dir = server.root / "t"
    job_dir.mkdir(parents=True)
    (job_dir / "forecast.csv").write_text("2026-01-01T00:00:00Z,300\n")
    spec = {**SPEC, "start": {"within": "8h", "forecast": {"csv": "forecast.csv"}}}
    assert server.client().register("t", spec)["created"]
    (job_dir / "forecast.csv").write_text("timestamp,value\nyesterday,lots\n")  # broken after registration
    start = _answer_start(server, "t")
    assert start is not None and start["start_in_s"] == 0.0 and start["deadline"] is None
    assert start["reason"].startswith("no plan (") and "start now" in start["reason"]
    assert str(server.root) not in start["reason"]  # the server's paths stay on the server
