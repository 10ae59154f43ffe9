"""A long-lived process (a notebook) is never charged its life before its first ask (issue 46)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO
from zeus_run.rundir.history import read_history

SCRIPT = """
import json, sys, time
if sys.argv[1] == "interactive":
    sys.ps1 = ">>> "  # what an interactive interpreter (a REPL, a kernel) has set
time.sleep(1.5)  # the notebook's life before its first ask: other cells
import zeus_run
job = zeus_run.Job(sys.argv[2])
with job.ask() as trial:
    t0 = time.time()
    for epoch in trial.epochs():
        time.sleep(0.2)
        trial.report(0.95)
    block = time.time() - t0
print(json.dumps({"block": block}))
"""


def _spec(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"""
name: nb
command: ["{sys.executable}", "x.py"]
batch_sizes: [8, 16]
default_batch_size: 8
target_metric: 0.9
max_epochs: 3
recurrences: 2
energy: {{source: estimate, watts: 100, basis: wall-time}}
run_dir: {tmp_path / "runs"}
"""
    )
    return spec


@pytest.mark.parametrize("mode", ["interactive", "script"])
def test_an_interactive_process_charges_its_trial_from_the_block_a_script_from_its_start(tmp_path, mode):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, str(_spec(tmp_path))], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr
    block = json.loads(r.stdout.strip().splitlines()[-1])["block"]
    (record,) = read_history(tmp_path / "runs")
    whole = record.time + (record.after_time or 0.0)
    assert record.window is not None
    if mode == "interactive":
        assert record.window["from"] == "trial" and "tail_s" not in record.window, record.window
        assert whole < 1.5, (whole, block)  # not the 1.5 s before its ask
        assert record.estimated_energy is None, record  # no start-up charged, so none estimated
    else:
        assert record.window["from"] == "process-start", record.window
        assert whole >= 1.5 + block, (whole, block)
