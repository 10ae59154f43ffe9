"""Driving one script through each door of a job (tests/doors): run, exec, shell ask/tell, the Job API, the server.

Every door runs `door_train.py` (or its training loop through the `Job` API, `door_job.py`) on its own run
directory with the same spec, in a child environment without ``PYTHONUNBUFFERED`` (users' machines,
cron and Slurm do not set it) and without the ``ZEUS_*`` variables of anything around the tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.doors import door_train
from zeus_run.contract import Env
from zeus_run.records import TrialRecord
from zeus_run.rundir.history import read_history

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("door_train.py")
SCRIPT_HF = Path(__file__).with_name("door_train_hf.py")
SCRIPT_JOB = Path(__file__).with_name("door_job.py")
PYTHON = sys.executable
#: How long one door may take on a loaded machine (unit: s); waited for, never asserted on.
DOOR_TIMEOUT = 600


def spec_text(run_dir: Path, extra_args: str = "", name: str = "doors") -> str:
    """The job every door runs: batch size 8 (the default, then pruning's first) reaches the target at epoch 2;
    16 (pruning's next) never does and is cut by the cost threshold. The paper's policy (``zeus``) prunes
    through every batch size, so each door makes the same three trials; zeus-voi's budget against the
    Default would not probe 16 in a three-recurrence job."""
    args = f', "--fail", "{extra_args}"' if extra_args else ""
    return f"""
name: {name}
command: ["{PYTHON}", "{SCRIPT}"{args}]
batch_sizes: [8, 16]
default_batch_size: 8
target_metric: 0.9
max_epochs: 6
recurrences: 3
beta: 1.2
lease: 600
optimizer: {{policy: zeus}}
energy: {{source: estimate, watts: 100, basis: cpu-time}}
run_dir: {run_dir}
"""


def clean_env(**extra: str) -> dict[str, str]:
    """The tests' environment without ``PYTHONUNBUFFERED`` and ``ZEUS_*``, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED" and not k.startswith("ZEUS_")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def zr() -> str:
    return f"{PYTHON} -m zeus_run"


def sh(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", script], cwd=cwd, env=clean_env(**env), capture_output=True, text=True, timeout=DOOR_TIMEOUT
    )


def history(run_dir: Path) -> list[TrialRecord]:
    return list(read_history(run_dir / "history.jsonl"))


def write_spec(tmp: Path, fail: str = "") -> tuple[Path, Path]:
    tmp.mkdir(parents=True, exist_ok=True)
    run_dir = tmp / "runs"
    spec = tmp / "job.yaml"
    spec.write_text(spec_text(run_dir, fail))
    return spec, run_dir


# -- the doors ---------------------------------------------------------------------------------


def door_run(tmp: Path, fail: str = "", trials: int = 3) -> list[TrialRecord]:
    """``zeus-run run`` (the launcher measures and stops the script)."""
    spec, run_dir = write_spec(tmp, fail)
    r = sh(f"{zr()} run {spec}", tmp)
    assert f'File "{REPO / "zeus_run"}' not in r.stderr, r.stderr  # no traceback of zeus-run's own
    return history(run_dir)[:trials]


def door_exec(tmp: Path, fail: str = "", trials: int = 3) -> list[TrialRecord]:
    """``zeus-run ask`` then ``zeus-run exec -- SCRIPT`` (the agent measures, stops and tells)."""
    spec, run_dir = write_spec(tmp, fail)
    args = f" --fail {fail}" if fail else ""
    for _ in range(trials):
        r = sh(f'eval "$({zr()} ask {spec} --format env)" || exit 9\n{zr()} exec -- {PYTHON} {SCRIPT}{args}\n', tmp)
        assert r.returncode != 9 and f'File "{REPO / "zeus_run"}' not in r.stderr, r.stderr
    return history(run_dir)


def door_shell(tmp: Path, fail: str = "", trials: int = 3) -> list[TrialRecord]:
    """``eval "$(zeus-run ask ... --format env)"``, the script, ``zeus-run tell`` (the script measures itself).

    As the docs' shell example does, the script's output goes to a log that the tell is given (``--log``):
    an error before the script could report anything (an import) is then judged from it, as the launcher does.
    """
    spec, run_dir = write_spec(tmp, fail)
    args = f" --fail {fail}" if fail else ""
    for _ in range(trials):
        r = sh(
            f'eval "$({zr()} ask {spec} --format env)" || exit 9\n'
            f"{PYTHON} {SCRIPT}{args} > train.log 2>&1\n"
            f'{zr()} tell "$ZEUS_RUN_DIR" "$ZEUS_ASK_TOKEN" --exit-code $? --log train.log\n',
            tmp,
        )
        assert r.returncode == 0, r.stderr
    return history(run_dir)


def door_plain(tmp: Path, fail: str = "", trials: int = 3) -> list[TrialRecord]:
    """The documented plain ask/tell: ``eval "$(zeus-run ask ...)"``, the script with its output where it goes,
    ``zeus-run tell ... --exit-code $?`` (no ``--log``: the script's own events are all the tell reads)."""
    spec, run_dir = write_spec(tmp, fail)
    args = f" --fail {fail}" if fail else ""
    for _ in range(trials):
        r = sh(
            f'eval "$({zr()} ask {spec} --format env)" || exit 9\n'
            f"{PYTHON} {SCRIPT}{args}\n"
            f'{zr()} tell "$ZEUS_RUN_DIR" "$ZEUS_ASK_TOKEN" --exit-code $?\n',
            tmp,
        )
        assert r.returncode == 0, r.stderr
    return history(run_dir)


def door_job(tmp: Path, fail: str = "", trials: int = 3) -> list[TrialRecord]:
    """The Python `Job` API in a script of its own (`door_job.py`; ``fail``: ``crash`` or ``oom`` raise in the
    block)."""
    spec, run_dir = write_spec(tmp)
    args = f" --fail {fail}" if fail else ""
    r = sh(f"{PYTHON} {SCRIPT_JOB} {spec} --trials {trials}{args}", tmp)
    assert r.returncode == (1 if fail == "oom-exit" else 0), r.stderr
    return history(run_dir)


#: What `door_train.py` raises for ``--fail crash`` and ``--fail oom``.
FAILURES = door_train.FAILURES


def door_hf(tmp: Path, fail: str = "", trials: int = 3) -> list[TrialRecord]:
    """``zeus-run run`` of the same job trained by a Hugging Face ``Trainer`` with `ZeusRunCallback`
    (`door_train_hf.py`); ``fail`` ``no-metric`` names a metric the evaluation does not log."""
    spec, run_dir = write_spec(tmp)
    args = f', "--fail", "{fail}"' if fail and fail != "no-metric" else ""
    name = "eval_acc" if fail == "no-metric" else "eval_accuracy"
    text = spec.read_text().replace(f'"{SCRIPT}"]', f'"{SCRIPT_HF}"{args}]')
    spec.write_text(text + f"metric: {{source: events, name: {name}}}\n")
    r = sh(f"{zr()} run {spec}", tmp)
    assert f'File "{REPO / "zeus_run"}' not in r.stderr, r.stderr  # no traceback of zeus-run's own
    return history(run_dir)[:trials]


_SERVERS: list[Any] = []  # the one server of the door, started at its first use, stopped at the session's end


def _door_server() -> Any:
    """``zeus-run serve`` on a free loopback port and a temporary root, one for the test process: each use of the
    door registers a job of its own there."""
    import atexit
    import tempfile

    from tests.server.helpers import ServerProcess

    if not _SERVERS:
        root = Path(tempfile.mkdtemp(prefix="zeus-run-door-server-")) / "root"
        # The spec names the door's script, outside the job: the operator allows its directory.
        server = ServerProcess(root, extra=("--allow-path", str(SCRIPT.parent)))
        server.wait_ready()
        atexit.register(server.stop)
        _SERVERS.append(server)
    return _SERVERS[0]


def door_server(tmp: Path, fail: str = "", trials: int = 3) -> list[TrialRecord]:
    """``zeus-run serve`` (one for the session, a job of its own per use); the script asks, reports and tells
    through the client."""
    server = _door_server()
    spec, _ = write_spec(tmp, fail)
    job = f"doors-{len(list(server.root.iterdir()))}-{os.getpid()}"
    client = server.client()
    client.register(job, spec.read_text().replace("name: doors\n", f"name: {job}\n"))
    args = f" --fail {fail}" if fail else ""
    env = {Env.SERVER: server.url, Env.SERVER_TOKEN: server.token, Env.SERVER_JOB: job}
    for _ in range(trials):
        sh(f"{PYTHON} {SCRIPT}{args}", tmp, **env)
    return [TrialRecord.from_json(r) for r in client.history(job)]


#: How long a tail may take to land after its process is gone (unit: s): the watcher sees the exit within a poll
#: and writes one line; on a loaded machine, seconds. Past it the test fails, saying which tails never landed.
TAIL_WAIT_S = 120


def with_tails(read: Callable[[], list[TrialRecord]], n: int) -> list[TrialRecord]:
    """The records once ``n`` of them have their tail after the tell (a process that told its trials itself:
    the last one's lands when the watcher sees the process gone, after the shell did), or its ``tail lost``
    marker: waited for, with a bound (`TAIL_WAIT_S`) that fails with a message."""
    import pytest

    deadline = time.monotonic() + TAIL_WAIT_S
    while True:
        records = read()
        landed = [bool(r.window and ("tail_s" in r.window or r.window.get("tail") == "lost")) for r in records[:n]]
        if len(records) >= n and all(landed):
            return records
        if time.monotonic() > deadline:
            pytest.fail(
                f"{TAIL_WAIT_S} s after the process exited, {len(records)} record(s) of {n} and the tails of "
                f"trials {[r.trial for r, ok in zip(records, landed, strict=False) if not ok]} never landed: "
                f"{[r.window for r in records[:n]]}"
            )
        time.sleep(0.05)
