"""The stop protocol: stop file, grace, SIGTERM, SIGKILL; the model save is never cut short."""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.cli.test_run_cli import zeus
from tests.conftest import REPO, SCRIPTS
from zeus_run.energy import EstimatedEnergy
from zeus_run.launcher import run_job
from zeus_run.spec import parse_spec
from zeus_run.trial.run import TrialOutcome, TrialPlan, run_trial

SCRIPT = str(SCRIPTS / "graceful_train.py")


def plan(tmp_path: Path, *args: str, **over) -> TrialPlan:
    tdir = tmp_path / "trial"
    tdir.mkdir(exist_ok=True)
    base = dict(
        argv=(sys.executable, SCRIPT, *args),
        workdir=tmp_path,
        env={
            "PYTHONPATH": str(REPO),
            "ZEUS_LOG_DIR": str(tdir),
            "ZEUS_EVENT_LOG": str(tdir / "events.jsonl"),
            "ZEUS_STOP_FILE": str(tdir / "stop"),
            "ZEUS_TARGET_METRIC": "0.9",
            "ZEUS_MAX_EPOCHS": "10",
        },
        log_path=tdir / "output.log",
        event_path=tdir / "events.jsonl",
        stop_path=tdir / "stop",
        max_epochs=10,
        target_metric=0.9,
        token="t" + str(time.monotonic_ns()),
        kill_grace=5.0,
    )
    base.update(over)
    return TrialPlan(**base)


def run(p: TrialPlan, cancel: threading.Event | None = None) -> TrialOutcome:
    return run_trial(p, EstimatedEnergy(100, basis="wall-time"), cancel=cancel)


def model(p: TrialPlan) -> str | None:
    f = p.log_path.parent / "model.txt"
    return f.read_text() if f.exists() else None


def test_helper_script_saves_after_its_loop_and_exits_0(tmp_path):
    p = plan(tmp_path, "--save-time", "1.5")
    out = run(p)
    assert out.stop_reason == "target_reached" and out.reached and out.epochs == 2
    assert out.exit_code == 0 and out.ended == "exited"
    assert model(p) == "loop"
    assert "model saved" in p.log_path.read_text()
    # The save is recorded apart from the cost, which stops at the target.
    assert out.after_time is not None and out.after_time >= 1.4
    assert out.after_energy == pytest.approx(100 * out.after_time, rel=0.05)
    assert out.cost == pytest.approx(100 * out.time, rel=1e-3)  # eta 0.5, wall-time estimate


def test_regex_on_target_stop_sends_sigterm_after_term_grace(tmp_path):
    p = plan(
        tmp_path,
        "--mode",
        "print",
        "--forever",
        "--sigterm",
        "save",
        metric_regex=r"val_acc=([0-9.]+)",
        on_target="stop",
        term_grace=0.3,
    )
    out = run(p)
    assert out.stop_reason == "target_reached" and out.epochs == 2
    assert out.ended == "sigterm" and out.exit_code == 0  # its handler saved and exited 0
    assert model(p) == "sigterm"


def test_regex_on_target_wait_lets_the_script_run_to_its_end(tmp_path):
    p = plan(
        tmp_path,
        "--mode",
        "print",
        "--extra-epochs",
        "3",
        "--save-time",
        "0.3",
        metric_regex=r"val_acc=([0-9.]+)",
        on_target="wait",
        term_grace=0.1,
    )
    out = run(p)
    assert out.stop_reason == "target_reached" and out.epochs == 2  # counted up to the target
    assert out.ended == "exited" and out.exit_code == 0 and model(p) == "loop"
    assert out.after_time is not None and out.after_time > 0.3


def test_script_that_keeps_running_gets_sigterm_after_stop_grace(tmp_path):
    p = plan(tmp_path, "--forever", stop_grace=0.5)
    out = run(p)
    assert out.stop_reason == "target_reached" and out.ended == "sigterm" and out.exit_code == -15
    assert out.after_time is not None and out.after_time >= 0.5
    assert model(p) is None


def test_sigterm_ignored_then_sigkill_after_kill_grace(tmp_path):
    p = plan(tmp_path, "--forever", "--sigterm", "ignore", stop_grace=0.2, kill_grace=0.3)
    out = run(p)
    assert out.ended == "killed" and out.exit_code == -9
    assert out.after_time is not None and out.after_time >= 0.5


def test_early_stop_is_prompt_stop_file_then_sigterm(tmp_path):
    # Never converges; a threshold of 100 W x 0.5 s cuts it; the script ignores the stop file.
    p = plan(
        tmp_path,
        "--needs",
        "0",
        "--forever",
        "--sigterm",
        "save",
        cost_threshold=50.0,
        term_grace=0.2,
        stop_grace=60.0,
    )
    out = run(p)
    assert out.stop_reason == "cost_threshold" and not out.reached
    assert out.cost <= 50.0 * 1.05
    assert out.ended == "sigterm" and out.exit_code == 0 and model(p) == "sigterm"
    assert out.after_time is not None and out.after_time < 30  # not the 60 s stop grace


def test_cancel_during_the_save_stops_promptly(tmp_path):
    p = plan(tmp_path, "--save-time", "60", "--sigterm", "save", term_grace=0.2)
    cancel = threading.Event()
    timer = threading.Timer(1.5, cancel.set)
    timer.start()
    try:
        out = run(p, cancel)
    finally:
        timer.cancel()
    assert out.stop_reason == "target_reached" and out.ended == "sigterm"
    assert "interrupted while the script was finishing" in (out.message or "")


def test_timeout_holds_during_the_stop_grace(tmp_path):
    p = plan(tmp_path, "--forever", stop_grace=None, timeout=1.0, term_grace=0.1)
    out = run(p)
    assert out.stop_reason == "target_reached" and out.ended == "sigterm"
    assert "timeout passed while the script was finishing" in (out.message or "")


def test_plan_and_outcome_are_plain_data(tmp_path):
    p = plan(tmp_path, "--needs", "1", cost_threshold=math.inf, stop_grace=None)
    again = TrialPlan.from_json(json.loads(json.dumps(p.to_json())))
    assert again == p
    out = run(p)
    assert TrialOutcome.from_json(json.loads(json.dumps(out.to_json()))) == out


SPEC = """
name: save
command: ["{python}", "%s", "--needs", "{needs}", "--save-time", "2", "--epoch-time", "0.05"]
env: {PYTHONPATH: "%s"}
batch_sizes: [1, 2]
default_batch_size: 2
target_metric: 0.9
max_epochs: 6
recurrences: 3
beta: null
energy: {source: estimate, watts: 100}
run_dir: runs
"""


def test_every_successful_trial_of_a_run_has_its_model_and_exit_code_0(tmp_path):
    text = (SPEC % (SCRIPT, REPO)).replace("{needs}", "2")
    spec = parse_spec(text, source=tmp_path / "job.yaml")
    result = run_job(spec)
    ok = [r for r in result.records if r.reached]
    assert len(ok) == 3
    for r in ok:
        assert r.exit_code == 0 and r.ended == "exited"
        assert (result.run_dir / r.log).parent.joinpath("model.txt").read_text() == "loop"
        assert r.after_time is not None and r.after_time >= 1.9 and r.after_energy is not None
    h = zeus("history", str(result.run_dir))
    assert h.returncode == 0 and "After the target or a stop" in h.stdout


@pytest.mark.parametrize(("curve_stop", "reason", "epochs"), [(True, "no_progress", 3), (False, "max_epochs", 10)])
def test_a_probe_whose_curve_is_flat_below_the_target_is_stopped_by_its_curve(tmp_path, curve_stop, reason, epochs):
    """The metric stays at 0.5 against a target of 0.9: after max(3, 10% of 10) epochs the curve cannot reach it."""
    p = plan(tmp_path, "--needs", "0", cost_threshold=1e12, curve_stop=curve_stop)
    out = run(p)
    assert out.stop_reason == reason and out.epochs == epochs and not out.reached
