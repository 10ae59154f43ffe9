"""``zeus-run cancel``, ``history`` with asks in flight, and ``--idempotency-key`` on ``ask`` and ``tell``."""

from __future__ import annotations

import json

from tests.asktell.test_asktell_api import spec_text
from tests.cli.test_asktell_cli import write
from tests.cli.test_run_cli import zeus
from zeus_run.errors import BUSY_EXIT_CODE, LEASE_EXPIRED_EXIT_CODE


def test_cancel_releases_a_lost_ask_as_infrastructure_and_history_shows_asks_in_flight(tmp_path):
    spec = write(tmp_path, spec_text())
    a = json.loads(zeus("ask", str(spec), "--format", "json").stdout)
    run_dir = a["run_dir"]
    shown = zeus("history", run_dir)
    assert shown.returncode == 0, shown.stderr
    assert "No trial recorded yet" in shown.stdout and "1 ask(s) in flight" in shown.stdout
    assert a["token"] in shown.stdout and "recurrence 1 try 1" in shown.stdout and "zeus-run cancel" in shown.stdout
    assert zeus("ask", str(spec)).returncode == BUSY_EXIT_CODE  # concurrency 1: the lost ask holds its place
    r = zeus("cancel", run_dir, a["token"], "--reason", "pod evicted", "--json")
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["stop_reason"] == "infrastructure" and not rec["observed"] and "pod evicted" in rec["message"]
    assert rec["provenance"]["cancelled"] and rec["provenance"]["ask_token"] == a["token"]
    shown = zeus("history", run_dir)
    assert shown.returncode == 0 and "in flight" not in shown.stdout and "1 trial(s)" in shown.stdout
    again = json.loads(zeus("ask", str(spec), "--format", "json").stdout)  # its recurrence, asked again
    assert (again["recurrence"], again["try"]) == (1, 2)
    shown = zeus("history", run_dir)
    assert "1 ask(s) in flight" in shown.stdout and again["token"] in shown.stdout
    late = zeus("tell", run_dir, a["token"], "--exit-code", "0")  # the cancelled trial told after all: too late
    assert late.returncode == LEASE_EXPIRED_EXIT_CODE and "Traceback" not in late.stderr
    twice = zeus("cancel", run_dir, a["token"])
    assert twice.returncode == 2 and "already closed" in twice.stderr
    unknown = zeus("cancel", run_dir, "no-such-token")
    assert unknown.returncode == 2 and "no ask in flight" in unknown.stderr
    assert zeus("replay", run_dir).returncode == 0


def test_history_of_a_job_with_no_trial_and_no_ask_says_so(tmp_path):
    spec = write(tmp_path, spec_text())
    a = json.loads(zeus("ask", str(spec), "--format", "json").stdout)
    assert zeus("cancel", a["run_dir"], a["token"]).returncode == 0
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "spec.yaml").write_text((tmp_path / "runs" / "spec.yaml").read_text())
    shown = zeus("history", str(tmp_path / "empty"))
    assert shown.returncode == 0 and "No trial recorded yet" in shown.stdout and "No ask in flight" in shown.stdout


def test_ask_and_tell_with_an_idempotency_key_answer_a_retry_as_the_first(tmp_path):
    spec = write(tmp_path, spec_text())
    first = json.loads(zeus("ask", str(spec), "--format", "json", "--idempotency-key", "run-42").stdout)
    again = zeus("ask", str(spec), "--format", "json", "--idempotency-key", "run-42")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["token"] == first["token"]
    tell = ("tell", first["run_dir"], first["token"], "--exit-code", "0", "--time", "5", "--json")
    rec = json.loads(zeus(*tell, "--idempotency-key", "tell-42").stdout)
    retried = zeus(*tell, "--idempotency-key", "tell-42")
    assert retried.returncode == 0 and json.loads(retried.stdout) == rec
    other = zeus("tell", first["run_dir"], first["token"], "--exit-code", "1", "--idempotency-key", "tell-42")
    assert other.returncode == 2 and "idempotency key" in other.stderr
    assert zeus(*tell).returncode == 2  # without the key: a second tell, refused
    assert len((tmp_path / "runs" / "history.jsonl").read_text().splitlines()) == 1
