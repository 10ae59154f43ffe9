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


def test_the_relay_needs_no_gnu_tee_and_logs_on_after_its_reader_is_gone(tmp_path, monkeypatch):
    """Issue 54, item 7: with no ``tee`` that takes ``-p`` anywhere (a fake one that refuses it first on PATH),
    the script still writes through a relay: once the launcher's end of the pipe is gone, the script goes on
    printing without a broken pipe, and the relay writes the rest into the log, dated in ``output.times``."""
    import select

    from zeus_run.trial import output
    from zeus_run.trial.log import TrialLog

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "tee").write_text("#!/bin/sh\necho 'tee: unrecognized option -p' >&2\nexit 1\n")
    (fake / "tee").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    monkeypatch.setattr(os, "defpath", str(fake))
    output.relay_argv.cache_clear()
    go, done = tmp_path / "go", tmp_path / "done"
    script = (
        "import os, time\nprint('epoch 1', flush=True)\n"
        f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.02)\n"
        "for e in (2, 3):\n    print(f'epoch {e}', flush=True)\n"
        f"open({str(done)!r}, 'w').write('ran to its end')\n"
    )
    log = TrialLog(tmp_path / "output.log")
    out = output.OutputChannel("pipe", log, tmp_path / "output.times")
    try:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        proc = subprocess.Popen(
            [sys.executable, "-c", script], stdout=out.child, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        fd = out.started(proc)
        ready, _, _ = select.select([fd], [], [], 60)
        assert ready and os.read(fd, 100) == b"epoch 1\n", "the relay passed nothing on"
        r, w = os.pipe()  # the launcher is gone: its end of the relay's pipe closes
        os.dup2(r, fd)
        os.close(r)
        os.close(w)
        go.touch()
        assert proc.wait(timeout=60) == 0  # no BrokenPipeError at its next print
        assert done.read_text() == "ran to its end"
    finally:
        out.close()
        log.close()
    assert log.error is None
    assert (tmp_path / "output.log").read_bytes() == b"epoch 1\nepoch 2\nepoch 3\n"
    times = tmp_path / "output.times"
    assert times.is_file(), "the relay dated nothing in output.times: it did not write the log alone"
    stamps = [line.split() for line in times.read_text().splitlines()]
    assert stamps[0][0] == "0" and int(stamps[-1][0]) == len(b"epoch 1\nepoch 2\nepoch 3\n")
    output.relay_argv.cache_clear()


def test_without_an_interpreter_for_the_relay_a_warning_says_so_once(monkeypatch, caplog):
    from zeus_run.trial import output

    monkeypatch.setattr(sys, "executable", "")
    output.relay_argv.cache_clear()
    try:
        with caplog.at_level("WARNING", logger="zeus_run.trial.output"):
            assert output.relay_argv() is None and output.relay_argv() is None
        warned = [r for r in caplog.records if "relay" in r.getMessage()]
        assert len(warned) == 1 and "dies with a launcher" in warned[0].getMessage()
    finally:
        output.relay_argv.cache_clear()
