"""Issue 26's repro through the CLI, without PYTHONUNBUFFERED (tests/conftest.py): output held in a buffer.

The unflushed script stops at its target epoch because every trial gets
``PYTHONUNBUFFERED=1``; when the spec's env turns buffering back on, the record and
the console say why the trial could not stop there. ``exec`` reads a program that
buffers into a pipe line by line under ``stdout: pty``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli.test_run_cli import zeus
from tests.conftest import PYTHON, SCRIPTS

#: The issue's script: 20 epochs of 0.3 s, printed without flushing.
UNFLUSHED = 'import time\nfor e in range(1, 21):\n    time.sleep(0.3); print(f"val_acc={e/20:.2f}")\n'


def job(tmp_path: Path, command: str, body: str = "", recurrences: int = 1) -> Path:
    (tmp_path / "train.py").write_text(UNFLUSHED)
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"""
name: unflushed
command: {command}
batch_sizes: [8, 16]
default_batch_size: 8
target_metric: 0.25
max_epochs: 20
recurrences: {recurrences}
metric: {{regex: 'val_acc=([0-9.]+)'}}
energy: {{source: estimate, watts: 100, basis: wall-time}}
run_dir: runs
{body}
"""
    )
    return spec


def history(tmp_path: Path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / "runs" / "history.jsonl").read_text().splitlines()]


def test_the_unflushed_script_stops_at_its_target_epoch(tmp_path):
    assert "PYTHONUNBUFFERED" not in os.environ
    r = zeus("run", str(job(tmp_path, f'["{PYTHON}", "train.py"]')))
    assert r.returncode == 0, r.stderr
    (rec,) = history(tmp_path)
    assert rec["reached"] and rec["epochs"] == 5 and rec["metrics"][-1] == 0.25
    assert "epoch_timing" not in rec and "buffers stdout" not in r.stderr
    log = (tmp_path / "runs" / rec["log"]).read_text()
    assert "val_acc=0.25" in log and "val_acc=1.00" not in log  # stopped at the target, not run to its end


def test_buffered_output_is_recorded_as_a_burst_warned_once_and_replays_exactly(tmp_path):
    spec = job(tmp_path, f'["{PYTHON}", "train.py"]', 'env: {PYTHONUNBUFFERED: ""}', recurrences=2)
    r = zeus("run", str(spec))
    assert r.returncode == 0, r.stderr
    recs = history(tmp_path)
    assert len(recs) == 2 and all(x["epoch_timing"] == "burst" and x["reached"] for x in recs)
    assert all("epoch timing unreliable: all 20 metric lines arrived" in x["message"] for x in recs)
    assert r.stderr.count("the script's output reached zeus-run only at exit") == 1
    assert "print(..., flush=True), or set PYTHONUNBUFFERED=1" in r.stderr
    log = (tmp_path / "runs" / recs[0]["log"]).read_text()
    assert "val_acc=1.00" in log  # it ran to its end: zeus-run saw nothing before the exit
    audit = zeus("replay", str(tmp_path / "runs"))
    assert audit.returncode == 0, audit.stdout + audit.stderr


@pytest.mark.parametrize("mode", ["pipe", "pty"])
def test_exec_reads_each_epoch_as_it_is_printed(tmp_path, mode):
    # pipe: the Python script (PYTHONUNBUFFERED=1 from the launch); pty: a program that
    # buffers into a pipe whatever PYTHONUNBUFFERED says, as C's stdio does.
    if mode == "pipe":
        spec = job(tmp_path, f'["{PYTHON}", "train.py"]')
    else:
        buffered = SCRIPTS / "buffered_train.py"
        spec = job(tmp_path, f'["{PYTHON}", "{buffered}", "--stdio", "c", "--epochs", "5"]', "stdout: pty")
        spec.write_text(spec.read_text().replace("target_metric: 0.25", "target_metric: 0.5"))
    r = zeus("exec", "--job", str(spec))
    assert r.returncode == 0, r.stderr
    (rec,) = history(tmp_path)
    assert rec["reached"] and rec["epochs"] == 5 and "epoch_timing" not in rec
    tdir = (tmp_path / "runs" / rec["log"]).parent
    if mode == "pty":
        assert (tdir / "acked.txt").read_text() == "5"  # the script saw each epoch counted as it printed it
        assert "\x1b" not in (tdir / "output.log").read_text()


def test_a_bad_stdout_setting_is_a_spec_error_with_exit_code_2(tmp_path):
    r = zeus("run", str(job(tmp_path, f'["{PYTHON}", "train.py"]', "stdout: terminal")))
    assert r.returncode == 2
    assert "stdout = 'terminal': must be one of pipe, pty" in r.stderr and "Traceback" not in r.stderr
