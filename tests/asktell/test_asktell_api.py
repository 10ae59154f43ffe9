"""Ask/tell, the library API: round trips, leases, refusals, and the audit of an ask/tell history."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS
from tests.factories import job_spec
from tests.launcher.test_faults import wait_for
from zeus_run.asktell import AlreadyTold, LeaseExpired, UnknownToken, ask, expire, heartbeat, report_epoch, tell
from zeus_run.contract import expires_at
from zeus_run.engine.replay import Knobs, audit
from zeus_run.errors import RunDirBusy
from zeus_run.rundir.history import read_history
from zeus_run.rundir.store import RunDir, read_running
from zeus_run.spec import load_spec

FAKE = str(SCRIPTS / "fake_train.py")


def spec_text(concurrency: int = 1, lease: float = 600, extra: str = "") -> str:
    """`tests.factories.job_spec` for job ``at``: six recurrences, ``concurrency`` trials at once."""
    return job_spec(extra, name="at", max_epochs=4, recurrences=6, concurrency=concurrency, lease=lease)


def audited(run_dir: Path, spec: Path) -> list:
    path = run_dir / "history.jsonl"
    assert path.exists(), f"no {path}: the told trials' records were not saved"
    records = list(read_history(path))
    result = audit(records, Knobs.from_spec(load_spec(spec)))
    assert result.divergence is None, result.divergence.describe()
    assert result.checked == len(records)  # every decision re-derived (none skipped)
    return records


def needs(batch_size: int) -> int:
    return {2: 2, 4: 3}.get(batch_size, 0)


def train_by_reports(a) -> None:
    """What a training script under ask does through report_epoch: epochs until told to stop."""
    for epoch in range(1, a.max_epochs + 1):
        metric = 1.0 if needs(a.batch_size) and epoch >= needs(a.batch_size) else 0.5
        if report_epoch(a.run_dir, a.token, epoch, metric) is not None:
            return


def test_ask_then_tell_records_a_trial_and_the_history_audits(write_spec):
    spec = write_spec(spec_text())
    a = ask(spec)
    assert (a.recurrence, a.attempt, a.trial, a.batch_size) == (1, 1, 0, 2)
    assert a.env["ZEUS_BATCH_SIZE"] == "2" and a.env["ZEUS_ASK_TOKEN"] == a.token
    assert a.command[-2:] == ["--needs", "1:0,2:2,4:3"] and "2" in a.command
    assert (a.trial_dir / "plan.json").is_file()
    assert json.loads(json.dumps(a.to_json()))["try"] == 1
    train_by_reports(a)
    record = tell(a.run_dir, a.token, exit_code=0)
    assert record.reached and record.stop_reason == "target_reached" and record.epochs == 2
    # Nothing measured its energy: recorded as unmeasured (no measured trial yet: charged watts x time, so labelled)
    assert record.energy_source == "unmeasured" and record.estimated and record.reported is None
    assert record.energy_method == "watts-x-time"
    assert record.seen == 0 and record.provenance["ask_token"] == a.token
    assert record.triggered_at == record.started_at is not None  # the ask is the trigger
    assert not (a.run_dir / "running.json").exists()
    for _ in range(4):
        b = ask(a.run_dir)  # a run directory names the job too
        train_by_reports(b)
        tell(b.run_dir, b.token, exit_code=0)
    records = audited(a.run_dir, spec)
    assert [r.trial for r in records] == list(range(5))


def test_reported_figures_are_marked_and_a_second_tell_is_refused(write_spec):
    spec = write_spec(spec_text())
    first = ask(spec)
    train_by_reports(first)
    tell(first.run_dir, first.token)
    a = ask(spec)
    record = tell(a.run_dir, a.token, exit_code=3, energy=500.0, time=10.0, message="RuntimeError: CUDA out of memory")
    assert record.stop_reason == "crashed" and record.cause == "RuntimeError: CUDA out of memory"
    assert record.reported == "time energy" and record.energy == 500.0 and record.energy_source == "reported"
    with pytest.raises(AlreadyTold, match="already told"):
        tell(a.run_dir, a.token)
    with pytest.raises(UnknownToken, match="no ask with this token"):
        tell(a.run_dir, "nope")
    b = ask(spec)
    assert (b.recurrence, b.attempt) == (2, 2) and "retry of recurrence 2 after try 1 ended crashed" in b.detail
    train_by_reports(b)
    tell(b.run_dir, b.token)
    audited(a.run_dir, spec)


def test_an_expired_ask_is_infrastructure_and_its_late_tell_is_refused(write_spec):
    spec = write_spec(spec_text(lease=1))
    a = ask(spec)
    report_epoch(a.run_dir, a.token, 1, 0.5)
    later = a.expires_at + 3600
    (expired,) = expire(a.run_dir, now=later)
    assert expired.stop_reason == "infrastructure" and not expired.observed and "lease expired" in expired.message
    with pytest.raises(LeaseExpired, match="too late"):
        tell(a.run_dir, a.token, exit_code=0, energy=1.0, time=1.0)
    assert json.loads((a.trial_dir / "late_tell.json").read_text())["energy"] == 1.0
    assert (a.trial_dir / "events.jsonl").read_text().count('"event": "epoch"') == 1  # its measurements are kept
    with pytest.raises(LeaseExpired):
        heartbeat(a.run_dir, a.token)
    b = ask(spec)
    assert (b.recurrence, b.attempt, b.batch_size) == (1, 2, 2)  # the same recurrence, b0 again
    assert "after try 1 ended infrastructure" in b.detail
    train_by_reports(b)
    assert tell(b.run_dir, b.token).reached
    audited(a.run_dir, spec)


def test_an_expired_ask_is_charged_its_span_at_the_jobs_measured_power(write_spec):
    """An evicted pod, a lost client, a tell a full disk lost: no measurement reached zeus-run, yet the trial ran.
    It is charged its span, from the ask to its last sign of life, at the job's measured power (labelled
    unmeasured), as a dead launcher's trial is; never 0 s and 0 J (issue 46, item 3)."""
    import os

    spec = write_spec(spec_text(lease=1))
    first = ask(spec)
    train_by_reports(first)
    tell(first.run_dir, first.token, exit_code=0, energy=2_500.0, time=10.0)  # measured: 250 W
    a = ask(spec)
    report_epoch(a.run_dir, a.token, 1, 0.5)
    events = a.trial_dir / "events.jsonl"
    asked_at = a.expires_at - 1  # the lease is 1 s past the ask
    os.utime(events, (asked_at + 40.0, asked_at + 40.0))  # its last sign of life: 40 s after the ask
    (expired,) = expire(a.run_dir, now=asked_at + 3600)
    assert expired.stop_reason == "infrastructure" and not expired.observed
    assert expired.energy_source == "unmeasured" and expired.estimated, expired  # imputed, and says so
    assert expired.time == pytest.approx(40.0, abs=1.0), expired
    assert expired.energy == pytest.approx(250.0 * expired.time, rel=0.10), expired
    assert "charged" in expired.message and expired.provenance["lease_expired"]
    audited(a.run_dir, spec)


def test_asks_beyond_concurrency_are_busy_and_concurrent_asks_audit(write_spec):
    spec = write_spec(spec_text(concurrency=2))
    a = ask(spec)
    b = ask(spec)
    assert (a.recurrence, b.recurrence) == (1, 2)
    with pytest.raises(RunDirBusy, match="2 ask\\(s\\) in flight"):
        ask(spec)
    train_by_reports(b)
    tell(b.run_dir, b.token)  # told back in the other order
    train_by_reports(a)
    tell(a.run_dir, a.token)
    records = audited(a.run_dir, spec)
    assert [r.trial for r in records] == [1, 0] and records[0].in_flight == (0,)


def test_run_records_an_expired_ask_then_runs(write_spec):
    from zeus_run.launcher import run_job

    spec = write_spec(spec_text(lease=1))
    a = ask(spec)
    wait_for(lambda: expires_at(read_running(a.run_dir)[0], 1) < time.time(), timeout=60)
    result = run_job(load_spec(spec), next_recurrences=1)
    first, second = result.records
    assert first.stop_reason == "infrastructure" and first.provenance["lease_expired"]
    assert (second.recurrence, second.attempt, second.reached) == (1, 2, True)


def test_an_ask_waits_for_another_ask_but_not_for_a_launcher(tmp_path):
    path = tmp_path / "rd"
    holder = RunDir.open(path, role="ask")
    got: list[RunDir] = []
    waiter = threading.Thread(target=lambda: got.append(RunDir.open(path, wait=60, role="tell")))
    waiter.start()
    holder.close()
    waiter.join(60)
    assert got and "tell" in (path / ".lock").read_text()
    got[0].close()
    with RunDir.open(path, role="run"), pytest.raises(RunDirBusy, match="busy"):
        RunDir.open(path, wait=60, role="ask")  # a launcher holds it for its whole run: no waiting
