"""One trigger through each door of a job, as a user types it: real CLI processes, without PYTHONUNBUFFERED."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.cli.test_run_cli import zeus
from tests.conftest import PYTHON, SCRIPTS

NIGHT = SCRIPTS / "night_train.py"


def night_job(tmp_path: Path, *, recurrences: str = "null", max_tries: int = 2, body: str = "") -> Path:
    """A job spec whose script (`tests/scripts/night_train.py`) runs out of memory while ``tmp_path/oom`` exists.

    No early stop (``beta: null``): its trials cost what a loaded machine's start-up makes them cost, and a
    test of what a door decides must not depend on whether that crossed a threshold.
    """
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"""
name: nightly
command: ["{PYTHON}", "{NIGHT}", "--batch-size", "{{batch_size}}", "--oom-file", "{tmp_path / "oom"}",
          "--needs", "8:4,16:3,32:2,64:2"]
batch_sizes: [8, 16, 32, 64]
default_batch_size: 16
target_metric: 0.9
max_epochs: 5
beta: null
recurrences: {recurrences}
max_tries: {max_tries}
energy: {{source: estimate, watts: 100, basis: wall-time}}
run_dir: runs
{body}
"""
    )
    return spec


def bad_night(spec: Path, bad: bool) -> None:
    """Make every run of the job's script run out of memory (``bad``), or not."""
    oom = spec.parent / "oom"
    if bad:
        oom.write_text("the GPU is shared tonight\n")
    else:
        oom.unlink(missing_ok=True)


def run_next(spec: Path) -> subprocess.CompletedProcess:
    """``zeus-run run JOB.yaml --next -q``: one cron trigger."""
    return zeus("run", str(spec), "--next", "-q")


def run_n(spec: Path, n: int) -> subprocess.CompletedProcess:
    """``zeus-run run JOB.yaml -n N``."""
    return zeus("run", str(spec), "-n", str(n), "--no-output")


def exec_job(spec: Path) -> subprocess.CompletedProcess:
    """``zeus-run exec --job JOB.yaml -q``: ask, run the spec's command under the agent, tell."""
    return zeus("exec", "--job", str(spec), "-q")


def ask_tell(spec: Path) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess | None, dict]:
    """``zeus-run ask --format json``, the answer's command run as a shell user would, then ``zeus-run tell``
    with its exit code and its output (``--log``). Returns the ask, the tell (None if the ask failed) and the answer."""
    asked = zeus("ask", str(spec), "--format", "json")
    if asked.returncode != 0:
        return asked, None, {}
    a = json.loads(asked.stdout)
    log = Path(a["trial_dir"]) / "my_output.log"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with open(log, "wb") as out:
        rc = subprocess.run(a["command"], env={**env, **a["env"]}, cwd=a["workdir"], stdout=out, stderr=out).returncode
    told = zeus("tell", a["run_dir"], a["token"], "--exit-code", str(rc), "--log", str(log))
    return asked, told, a


def history(spec: Path) -> list[dict]:
    path = spec.parent / "runs" / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def audit_exact(spec: Path) -> str:
    """``zeus-run replay RUN_DIR``: every recorded decision re-derived, or an AssertionError saying where not."""
    table = zeus("replay", str(spec.parent / "runs"))
    assert table.returncode == 0, table.stdout + table.stderr
    result = json.loads(zeus("replay", str(spec.parent / "runs"), "--format", "json").stdout)
    assert result["divergence"] is None and result["checked"] == result["records"] == len(history(spec)), result
    return table.stdout
