"""A launch that fails for a reason of the machine (too many open files) is an environment error, not the command's.

The CLI runs as a user runs it; the fault is injected into its ``subprocess.Popen`` for the
training command only (a real ``ulimit -n`` would fail the launcher anywhere first).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import PYTHON, SCRIPTS

REPO = Path(__file__).resolve().parents[2]

FAULTY = """
import errno, runpy, subprocess, sys
real = subprocess.Popen.__init__
def popen(self, args, *a, **k):
    if any("fake_train.py" in str(x) for x in (args if isinstance(args, (list, tuple)) else [args])):
        raise OSError(errno.{errno}, "{strerror}")
    return real(self, args, *a, **k)
subprocess.Popen.__init__ = popen
sys.argv = ["zeus-run", *sys.argv[1:]]
runpy.run_module("zeus_run", run_name="__main__")
"""


def _spec(tmp_path: Path) -> Path:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        textwrap.dedent(
            f"""
            name: e
            command: ["{PYTHON}", "{SCRIPTS / "fake_train.py"}", "--needs", "2:1,1:1"]
            batch_sizes: [1, 2]
            default_batch_size: 2
            target_metric: 0.5
            recurrences: 1
            max_tries: 2
            energy: {{source: estimate, watts: 100}}
            run_dir: runs
            """
        )
    )
    return spec


def _zeus(tmp_path: Path, *args: str, fault: tuple[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(REPO)
    if fault is None:
        cmd = [sys.executable, "-m", "zeus_run", *args]
    else:
        wrapper = tmp_path / "faulty.py"
        wrapper.write_text(FAULTY.format(errno=fault[0], strerror=fault[1]))
        cmd = [sys.executable, str(wrapper), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)


def test_too_many_open_files_at_launch_is_an_environment_error_and_leaves_no_marker(tmp_path):
    spec = _spec(tmp_path)
    r = _zeus(tmp_path, "run", str(spec), "--no-output", fault=("EMFILE", "Too many open files"))
    assert r.returncode == 2, r.stderr
    assert "Too many open files" in r.stderr and "ulimit -n" in r.stderr, r.stderr
    assert "Fix `command`" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    runs = tmp_path / "runs"
    assert not (runs / "running.json").exists(), "a launch that never started left its in-flight marker"
    assert not (runs / "history.jsonl").exists() or not (runs / "history.jsonl").read_text().strip()

    # The machine is fixed: the next run runs recurrence 1's first try; no phantom "launcher died" try.
    r = _zeus(tmp_path, "run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in (runs / "history.jsonl").read_text().splitlines()]
    assert [(x["recurrence"], x["attempt"], x["stop_reason"]) for x in records] == [(1, 1, "target_reached")]
    assert "died" not in r.stderr


def test_a_command_that_cannot_be_executed_still_names_command(tmp_path):
    spec = _spec(tmp_path)
    r = _zeus(tmp_path, "run", str(spec), "--no-output", fault=("EACCES", "Permission denied"))
    assert r.returncode == 2, r.stderr
    assert "Fix `command` in the job spec" in r.stderr, r.stderr
    assert not (tmp_path / "runs" / "running.json").exists()
