"""The trial agent (``python -m zeus_run.trial.agent PLAN.json``) and the local executor that runs its code in-process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO
from tests.test_escape import REGEX, job
from tests.trial.test_stop import plan as trial_plan
from zeus_run.launcher import run_job
from zeus_run.spec import load_spec
from zeus_run.trial.agent import EPOCHS_NAME, HEARTBEAT_NAME, OUTCOME_NAME, AgentPlan, read_outcome


def agent(plan_file: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "zeus_run.trial.agent", str(plan_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_agent_runs_a_trial_from_its_plan_and_leaves_the_outcome(tmp_path):
    p = AgentPlan(
        trial_plan(tmp_path, "--needs", "3", "--save-time", "0.3"), tmp_path / "trial", {"source": "estimate"}
    )
    proc = agent(p.write())
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    out = read_outcome(p.dir)
    assert out is not None and out.reached and out.epochs == 3 and out.exit_code == 0
    rows = [json.loads(x) for x in (p.dir / EPOCHS_NAME).read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2, 3] and rows[-1]["metric"] == 1.0
    assert rows[-1]["cost"] == out.cost  # the last counted epoch is where the cost stopped
    beat = json.loads((p.dir / HEARTBEAT_NAME).read_text())
    assert beat["pid"] == proc.pid
    assert not list(p.dir.glob(".*.tmp"))  # every file was written atomically


def test_sigterm_to_the_agent_stops_the_trial_and_still_writes_the_outcome(tmp_path):
    p = AgentPlan(
        trial_plan(tmp_path, "--needs", "0", "--epoch-time", "0.2", "--max-epochs", "1000"), tmp_path / "trial"
    )
    proc = agent(p.write())
    end = time.monotonic() + 60
    while not (p.dir / EPOCHS_NAME).exists() or not (p.dir / EPOCHS_NAME).read_text():
        assert time.monotonic() < end and proc.poll() is None
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    out = read_outcome(p.dir)
    assert out is not None and out.stop_reason == "interrupted" and out.ended in ("exited", "sigterm")


def test_agent_refuses_a_bad_plan_and_reports_a_command_that_cannot_start(tmp_path):
    bad = tmp_path / "plan.json"
    bad.write_text("{not json")
    proc = agent(bad)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "cannot read the plan" in err
    p = AgentPlan(trial_plan(tmp_path, argv=("/nonexistent/train",)), tmp_path / "trial")
    proc = agent(p.write())
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3 and "does not exist" in err
    out = read_outcome(p.dir)
    assert out is not None and out.stop_reason == "crashed" and "does not exist" in (out.message or "")


def test_local_executor_leaves_the_agents_files_in_each_trial_dir(tmp_path):
    spec = load_spec(
        job(
            tmp_path,
            "import time\nfor a in (0.5, 1.0):\n    time.sleep(0.05)\n    print(f'val_acc={a}', flush=True)\n",
            REGEX,
        )
    )
    result = run_job(spec)
    (rec,) = result.new
    tdir = (result.run_dir / rec.log).parent
    out = read_outcome(tdir)
    assert out is not None and out.cost == rec.cost and out.stop_reason == rec.stop_reason
    assert len((tdir / EPOCHS_NAME).read_text().splitlines()) == rec.epochs == 2
    assert not (tdir / HEARTBEAT_NAME).exists()  # in-process: no heartbeat needed
    assert (tdir / OUTCOME_NAME).exists()
