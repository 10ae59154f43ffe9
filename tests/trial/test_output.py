"""A trial's output through a pipe or a pseudo-terminal (issue 26): line-timed epochs, or a burst said so.

The scripts here never flush, and the suite runs without ``PYTHONUNBUFFERED``
(tests/conftest.py), as users' machines, cron and Slurm do. Whether zeus-run read
an epoch while the script ran is a state the script sees (`buffered_train.py`
waits for the agent's ``epochs.jsonl``), not a duration.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, SCRIPTS
from tests.trial.test_stop import plan as trial_plan
from zeus_run.contract import TrialOutcome
from zeus_run.energy import EstimatedEnergy
from zeus_run.trial.agent import AgentPlan, read_outcome, run_agent
from zeus_run.trial.launch import trial_environment
from zeus_run.trial.output import EscapeFilter

SCRIPT = str(SCRIPTS / "buffered_train.py")
REGEX = r"val_acc=([0-9.]+)"


def agent_plan(tmp_path: Path, *args: str, stdout: str = "pipe", env: dict[str, str] | None = None) -> AgentPlan:
    """A trial of buffered_train.py read by regex, to its own end (the target is out of reach)."""
    base = trial_plan(tmp_path, metric_regex=REGEX, target_metric=2.0, stdout=stdout)
    trial = dataclasses.replace(base, argv=(sys.executable, SCRIPT, *args), env={**base.env, **(env or {})})
    return AgentPlan(trial, tmp_path / "trial", {"source": "estimate", "watts": 100.0, "basis": "wall-time"})


def in_process(p: AgentPlan) -> TrialOutcome:
    """The local executor's door (and ``exec``'s agent code): the agent's code in this process."""
    return run_agent(p, EstimatedEnergy(100, basis="wall-time"), heartbeat=False)


def as_agent(p: AgentPlan) -> TrialOutcome:
    """The Slurm door: ``python -m zeus_run.trial.agent PLAN.json`` as its own process."""
    proc = subprocess.run(
        [sys.executable, "-m", "zeus_run.trial.agent", str(p.write())],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr
    out = read_outcome(p.dir)
    assert out is not None
    return out


def acked(p: AgentPlan) -> int:
    """Epochs zeus-run had counted while the script ran (the script's own view)."""
    return int((p.dir / "acked.txt").read_text())


def test_the_trial_environment_sets_pythonunbuffered_unless_the_spec_env_does(monkeypatch):
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    env = trial_environment({"ZEUS_SEED": "1"})
    assert env["PYTHONUNBUFFERED"] == "1" and env["TERM"] == "xterm-256color" and env["ZEUS_SEED"] == "1"
    assert trial_environment({"PYTHONUNBUFFERED": ""})["PYTHONUNBUFFERED"] == ""  # the spec's env wins
    monkeypatch.setenv("PYTHONUNBUFFERED", "")
    assert trial_environment({})["PYTHONUNBUFFERED"] == "1"  # the launcher's own setting does not
    assert trial_environment({}, stdout="pty")["TERM"] == "dumb"
    assert trial_environment({"TERM": "vt100"}, stdout="pty")["TERM"] == "vt100"


def test_an_unflushed_python_script_is_read_epoch_by_epoch(tmp_path):
    assert "PYTHONUNBUFFERED" not in os.environ  # as on users' machines (tests/conftest.py)
    p = agent_plan(tmp_path)
    out = in_process(p)
    assert acked(p) == 3  # each epoch was read while the script waited after printing it
    assert out.epochs == 3 and out.metrics == (0.1, 0.2, 0.3) and out.epoch_timing is None


def test_output_held_until_the_exit_is_marked_burst_and_says_why(tmp_path):
    # The spec's env turns Python's buffering back on: every line reaches zeus-run at the exit.
    p = agent_plan(tmp_path, "--quiet", "2.2", "--ack-wait", "0.3", env={"PYTHONUNBUFFERED": ""})
    out = in_process(p)
    assert acked(p) == 0  # nothing was read while it ran
    assert out.epochs == 3 and out.epoch_timing == "burst"
    assert "epoch timing unreliable: all 3 metric lines arrived" in (out.message or "")
    assert out.record_fields()["epoch_timing"] == "burst"


def test_stdout_pty_reads_a_program_that_buffers_into_a_pipe_line_by_line(tmp_path):
    # Block-buffered unless on a terminal, whatever PYTHONUNBUFFERED says (as C's stdio).
    p = agent_plan(tmp_path, "--stdio", "c", stdout="pty", env={"PYTHONUNBUFFERED": ""})
    out = as_agent(p)
    assert acked(p) == 3 and out.epochs == 3 and out.epoch_timing is None and out.exit_code == 0
    log = p.trial.log_path.read_bytes()
    assert log.startswith(b"TERM=dumb\nepoch 1 val_acc=0.1\n")  # colour codes gone, "\n" kept as written
    assert b"\x1b" not in log and b"\r" not in log and log.endswith(b"done\n")


def test_the_same_program_through_a_pipe_is_a_burst(tmp_path):
    p = agent_plan(tmp_path, "--stdio", "c", "--quiet", "2.2", "--ack-wait", "0.3")
    out = as_agent(p)
    assert acked(p) == 0 and out.epochs == 3 and out.epoch_timing == "burst"


def test_under_a_pty_the_end_of_output_and_the_exit_code_are_kept(tmp_path):
    # 300 kB still unread when the script exits: all of it reaches the log, then the end of output.
    p = agent_plan(tmp_path, "--stdio", "c", "--fill", "300000", "--exit-code", "3", stdout="pty")
    out = in_process(p)
    assert out.exit_code == 3 and out.stop_reason == "crashed" and out.epochs == 3
    lines = p.trial.log_path.read_text().splitlines()
    assert lines[-1] == "done" and lines[-2].startswith(f"{300000 // 100 - 1:08d}")
    assert "done" in (out.message or "")  # the log's tail, for the crash


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"a\x1b[32mb\x1b[0mc\n"], b"abc\n"),
        ([b"a\x1b[3", b"2mb\n"], b"ab\n"),  # a sequence split across two reads
        ([b"x\x1b]0;title\x07y\n"], b"xy\n"),  # a window title
        ([b"tail\x1b["], b"tail["),  # never finished: its text is kept, the ESC is not
        ([b"\x1b[2K\rprogress 50%\n"], b"\rprogress 50%\n"),
    ],
)
def test_escape_filter(chunks, expected):
    f = EscapeFilter()
    got = b"".join(f.feed(c) for c in chunks) + f.flush()
    assert got == expected
