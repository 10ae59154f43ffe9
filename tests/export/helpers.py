"""Run directories for the export tests: real ones (the fake training script) and a simulated one."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import PYTHON, REPO, SCRIPTS
from tests.factories import CliResult, zeus_run_cli
from tests.sim_helpers import write_tiny_traces

FAKE = str(SCRIPTS / "fake_train.py")


def spec_text(name: str, run_dir: Path, recurrences: int, export: str = "") -> str:
    """A job whose batch size 2 (the default) reaches the target in 2 epochs, 4 in 3; 1 never does."""
    return f"""
name: {name}
command: ["{PYTHON}", "{FAKE}", "--batch-size", "{{batch_size}}", "--needs", "1:0,2:2,4:3"]
batch_sizes: [1, 2, 4]
default_batch_size: 2
learning_rate: 0.1
target_metric: 0.9
max_epochs: 4
recurrences: {recurrences}
seed: 3
optimizer: {{revision: 3}}  # the exports need probes and retries; revision 4's budget skips them in short runs
energy: {{source: estimate, watts: 100, basis: wall-time}}
run_dir: {run_dir}
{export}
"""


def real_run(tmp_path: Path, name: str, recurrences: int, export: str = "", run_dir: Path | None = None) -> Path:
    """Run (or resume) a real job in this process until ``recurrences``; return its run directory."""
    from zeus_run.launcher import run_job
    from zeus_run.spec import parse_spec

    run_dir = run_dir or tmp_path / "runs" / name
    spec_file = tmp_path / f"{name}.yaml"
    spec_file.write_text(spec_text(name, run_dir, recurrences, export))
    run_job(parse_spec(spec_file.read_text(), source=spec_file))
    return run_dir


def simulated_run(tmp_path: Path) -> Path:
    """A simulated run directory (``zeus-run simulate --run-dir``) on the tiny traces."""
    traces = write_tiny_traces(tmp_path / "traces")
    out = tmp_path / "runs"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "zeus_run",
            "simulate",
            "squad",
            "--traces",
            str(traces),
            "--gpu",
            "tiny",
            "--seeds",
            "1",
            "--run-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (run,) = out.glob("squad-tiny-*-seed1")
    return run


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def zeus(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> CliResult:
    """``zeus-run ARGS``, in-process (`tests.factories.zeus_run_cli`)."""
    return zeus_run_cli(*args, cwd=cwd or REPO, env={"COLUMNS": "200", **(env or {})})
