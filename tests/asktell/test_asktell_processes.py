"""Ask/tell across processes: three trainers at once, one SIGKILLed mid-trial; ``zeus-run exec``; ``Job``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.asktell.test_asktell_api import spec_text
from tests.cli.test_run_cli import zeus
from tests.conftest import PYTHON, SCRIPTS
from tests.launcher.test_faults import wait_for
from zeus_run.asktell import expire
from zeus_run.rundir.history import read_history
from zeus_run.rundir.store import read_running

WORKER = str(SCRIPTS / "ask_worker.py")
FAKE = str(SCRIPTS / "fake_train.py")


def records(run_dir: Path) -> list:
    return list(read_history(run_dir / "history.jsonl")) if (run_dir / "history.jsonl").exists() else []


def epochs_written(trial_dir: Path) -> int:
    try:
        return (trial_dir / "events.jsonl").read_text().count('"event": "epoch"')
    except FileNotFoundError:
        return 0


def test_three_trainers_one_killed_its_lease_expires_nothing_else_is_lost_and_replay_passes(write_spec, tmp_path):
    spec = write_spec(spec_text(concurrency=3, lease=6))
    run_dir = spec.parent / "runs"
    hold = tmp_path / "hold"
    procs = []
    for _ in range(3):  # one at a time, so each ask is taken while the others are in flight
        p = subprocess.Popen([PYTHON, WORKER, str(spec), str(hold)], stdout=subprocess.PIPE, text=True)
        procs.append((p, Path(p.stdout.readline().strip())))
    markers = read_running(run_dir) or []
    assert len(markers) == 3 and all(m.asked for m in markers)
    for _, tdir in procs:
        wait_for(lambda tdir=tdir: epochs_written(tdir) >= 1, timeout=60)  # each is mid-trial, held
    victim, victim_dir = procs[1]
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    hold.touch()
    for p, _ in (procs[0], procs[2]):
        assert p.wait(60) == 0
    told = records(run_dir)
    assert len(told) == 2 and all(r.stop_reason != "infrastructure" for r in told)
    # The victim's ask is still in flight until its lease (6 s without a heartbeat) runs out.
    expired: list = []
    wait_for(lambda: bool(expired.extend(expire(run_dir)) or expired), timeout=120)
    (lost,) = expired
    assert lost.stop_reason == "infrastructure" and not lost.observed and "lease expired" in lost.message
    assert epochs_written(victim_dir) >= 1  # its measurements stay in its trial directory
    history = records(run_dir)
    assert history[:2] == told and len(history) == 3 and read_running(run_dir) is None
    assert sorted(r.trial for r in history) == [0, 1, 2]
    # The killed one's recurrence is the next ask's, as its next try; it is not counted against max_tries.
    hold.unlink()
    p = subprocess.Popen([PYTHON, WORKER, str(spec), str(tmp_path / "go")], stdout=subprocess.PIPE, text=True)
    retry_dir = Path(p.stdout.readline().strip())
    (tmp_path / "go").touch()
    assert p.wait(60) == 0
    retry = records(run_dir)[-1]
    assert (retry.recurrence, retry.attempt) == (lost.recurrence, lost.attempt + 1)
    assert retry_dir.name == f"r{lost.recurrence:04d}-t{lost.attempt + 1:02d}"
    assert "after try 1 ended infrastructure" in retry.detail
    audit = zeus("replay", str(run_dir), "--format", "json")
    assert audit.returncode == 0, audit.stderr
    assert json.loads(audit.stdout)["checked"] == 4


def regex_spec(tmp_path: Path, extra: str = "") -> Path:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        spec_text(extra="metric: {source: regex, regex: 'val_acc=(\\S+)'}\n" + extra).replace(
            '"--needs", "1:0,2:2,4:3"]',
            '"--needs", "1:0,2:2,4:3", "--mode", "print", "--ignore-stop", "--epoch-time", "0.05"]',
        )
    )
    return spec


def test_exec_stops_an_unmodified_script_at_the_target(tmp_path):
    spec = regex_spec(tmp_path)
    r = zeus("exec", "--job", str(spec))  # the spec's command: prints val_acc=..., never stops by itself
    assert r.returncode == 0, r.stderr
    assert "val_acc=1.000" in r.stdout  # its output passes through
    (rec,) = records(tmp_path / "runs")
    assert rec.stop_reason == "target_reached" and rec.reached and rec.epochs == 2
    assert rec.ended in ("sigterm", "killed")  # it ignored the stop file: the agent ended it
    assert rec.reported is None and rec.energy_source == "estimate"  # measured (labelled estimate) where it ran
    assert zeus("replay", str(tmp_path / "runs")).returncode == 0


def test_exec_after_eval_of_an_env_ask_in_sh_and_a_crash_exits_1(tmp_path):
    spec = regex_spec(tmp_path)
    zr = f"{sys.executable} -m zeus_run"
    script = (
        f'eval "$({zr} ask {spec} --format env)" || exit 9\n'
        'test "$ZEUS_BATCH_SIZE" = 2 || exit 8\n'
        f'{zr} exec -- {PYTHON} {FAKE} --batch-size "$ZEUS_BATCH_SIZE" --crash-at 1 --mode print\n'
    )
    r = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    (rec,) = records(tmp_path / "runs")
    assert rec.stop_reason == "crashed" and rec.exit_code == 3 and "boom" in (rec.cause or "")


def test_the_python_api_records_a_crash_with_its_message_and_reraises(write_spec):
    import zeus_run

    # No early stop: the first recurrence costs microseconds here, and the stop rule (measured in this
    # process) would cut the next trial before its crash, as the launcher's would.
    spec = write_spec(spec_text(extra="beta: null"))
    job = zeus_run.Job(spec)
    with job.ask() as trial:
        for epoch in trial.epochs():
            trial.report(1.0 if epoch >= 2 else 0.5)
    assert job.record is not None and job.record.reached and job.record.reported is None
    with pytest.raises(ValueError, match="loss is nan"), job.ask() as trial:
        for _ in trial.epochs():
            trial.report(0.5)
            raise ValueError("loss is nan")
    rec = job.record
    assert rec.recurrence == 2 and rec.stop_reason == "crashed" and rec.cause == "ValueError: loss is nan"
    assert rec.epochs == 1 and rec.exit_code == 1
    again = zeus_run.Job(run_dir=job.run_dir)  # the crashed recurrence's next try
    with again.ask() as trial:
        for _ in trial.epochs():
            trial.report(1.0)
    assert (again.record.recurrence, again.record.attempt) == (
        2,
        2,
    ) and "after try 1 ended crashed" in again.record.detail
    audit = zeus("replay", str(job.run_dir), "--format", "json")
    assert audit.returncode == 0 and json.loads(audit.stdout)["checked"] == 3, audit.stdout + audit.stderr
