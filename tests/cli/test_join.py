"""A trigger that finds the run directory held, with overlap allowed (``concurrency > 1``), joins the launcher."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.test_run_cli import spec_text, zeus
from tests.conftest import REPO
from zeus_run.rundir.store import read_running

#: How long a state may take to come on a loaded machine (unit: s); waited for, never asserted on.
STATE_TIMEOUT_S = 120


def joined_spec(write_spec, hold: Path) -> Path:
    """Open-ended, two trials at once; each trial waits after its first epoch until ``hold`` exists."""
    text = spec_text(f"--hold {hold}").replace("recurrences: 1\n", "recurrences: null\nconcurrency: 2\n")
    return write_spec(text)


def launch(spec: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "zeus_run", "run", str(spec), "--no-output", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def in_flight(run_dir: Path) -> int:
    return len(read_running(run_dir) or [])


def wait_until(what: str, check, *procs: subprocess.Popen) -> None:
    deadline = time.monotonic() + STATE_TIMEOUT_S
    while not check():
        for p in procs:
            assert p.poll() is None, f"exited {p.returncode} before {what}: {p.communicate()}"
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


@contextlib.contextmanager
def two_triggers(spec: Path, hold: Path, first_args: tuple[str, ...], slots_busy: int):
    """A first trigger with ``slots_busy`` trials held in flight, then a second ``--next``; both killed if left."""
    run_dir = spec.parent / "runs"
    first = launch(spec, *first_args)
    second = None
    try:
        wait_until(f"{slots_busy} trial(s) are in flight", lambda: in_flight(run_dir) == slots_busy, first)
        second = launch(spec, "--next")
        yield first, second
    finally:
        hold.write_text("go")
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def test_a_second_trigger_joins_and_its_recurrence_runs_beside_the_first(write_spec, tmp_path):
    hold = tmp_path / "go"
    spec = joined_spec(write_spec, hold)
    run_dir = spec.parent / "runs"
    with two_triggers(spec, hold, ("--next",), 1) as (first, second):
        # The joiner's recurrence runs in the holder's second slot: two trials in flight at once.
        wait_until("the joined trial is in flight too", lambda: in_flight(run_dir) == 2, first, second)
        hold.write_text("go")
        _, err1 = first.communicate(timeout=STATE_TIMEOUT_S)
        _, err2 = second.communicate(timeout=STATE_TIMEOUT_S)
    assert first.returncode == 0, err1
    assert second.returncode == 0, err2
    assert "joined the launcher" in err2 and "recurrence(s) 2" in err2
    assert "joined this run" in err1  # the holder says so too
    recs = records(run_dir)
    assert sorted(r["recurrence"] for r in recs if r["reached"]) == [1, 2]
    (mine,) = [r for r in recs if r["recurrence"] == 2]
    (theirs,) = [r for r in recs if r["recurrence"] == 1]
    assert mine["triggered_at"] != theirs["triggered_at"]  # each recurrence carries its own trigger
    assert mine["in_flight"] == [theirs["trial"]]  # decided with the first in flight: the concurrent rule
    assert not list((run_dir / "joins").iterdir())  # the request is gone once answered
    audit = zeus("replay", str(run_dir), "--format", "json")
    assert audit.returncode == 0, audit.stderr
    assert json.loads(audit.stdout)["checked"] == len(recs)


def test_a_joiner_whose_holder_dies_takes_over_and_finishes(write_spec, tmp_path):
    hold = tmp_path / "go"
    spec = joined_spec(write_spec, hold)
    run_dir = spec.parent / "runs"
    with two_triggers(spec, hold, ("--next",), 1) as (first, second):
        wait_until("the joined trial is in flight too", lambda: in_flight(run_dir) == 2, first, second)
        first.send_signal(signal.SIGKILL)  # the launcher dies; its trials are left behind
        first.wait(timeout=STATE_TIMEOUT_S)
        hold.write_text("go")
        _, err2 = second.communicate(timeout=STATE_TIMEOUT_S)
    assert second.returncode == 0, err2
    assert "let go of it" in err2 and "running them here" in err2
    recs = records(run_dir)
    assert sorted(r["recurrence"] for r in recs if r["reached"]) == [1, 2]  # nothing lost
    keys = [(r["recurrence"], r["attempt"]) for r in recs]
    assert len(keys) == len(set(keys))  # nothing recorded twice
    audit = zeus("replay", str(run_dir), "--format", "json")
    assert audit.returncode == 0, audit.stderr


def test_a_joiner_interrupted_before_its_request_is_claimed_withdraws_it(write_spec, tmp_path):
    hold = tmp_path / "go"
    spec = joined_spec(write_spec, hold)
    run_dir = spec.parent / "runs"
    # The first trigger's own two recurrences fill both slots: nothing is claimed while they run.
    with two_triggers(spec, hold, ("--next", "2"), 2) as (first, second):
        wait_until(
            "the request is written",
            lambda: (run_dir / "joins").is_dir() and any((run_dir / "joins").iterdir()),
            first,
            second,
        )
        second.send_signal(signal.SIGINT)
        _, err2 = second.communicate(timeout=STATE_TIMEOUT_S)
        hold.write_text("go")
        _, err1 = first.communicate(timeout=STATE_TIMEOUT_S)
    assert second.returncode == 130, err2
    assert "request was withdrawn" in err2
    assert first.returncode == 0, err1
    assert sorted(r["recurrence"] for r in records(run_dir) if r["reached"]) == [1, 2]  # nothing run for it
    assert not list((run_dir / "joins").iterdir())


def test_a_trigger_that_finds_the_lock_held_by_a_holder_not_yet_named_waits_and_does_not_exit_busy(
    write_spec, tmp_path
):
    """The moment between a launcher taking a fresh run directory's lock and naming itself in ``.lock``: a second
    trigger used to exit 75 ("pid unknown"). It waits for a name or the lock; here the holder lets go unnamed,
    and the trigger runs its recurrence itself."""
    from zeus_run import _fs

    spec = joined_spec(write_spec, tmp_path / "go")
    (tmp_path / "go").write_text("go")
    run_dir = spec.parent / "runs"
    run_dir.mkdir()
    fd = _fs.lock_dir(run_dir)  # held, and no .lock naming the holder
    try:
        trigger = launch(spec, "--next")
        lines: list[str] = []
        assert trigger.stderr is not None
        for line in trigger.stderr:  # a state: the trigger says it waits (it used to exit 75 here)
            lines.append(line)
            if "waiting for a launcher to join, or for the run directory" in line:
                break
        assert any("not named itself yet" in line for line in lines), "".join(lines)
    finally:
        os.close(fd)
    _, err = trigger.communicate(timeout=STATE_TIMEOUT_S)
    assert trigger.returncode == 0, "".join(lines) + err
    assert [r["recurrence"] for r in records(run_dir) if r["reached"]] == [1]


def test_triggers_fired_at_once_on_a_fresh_run_directory_all_join_or_run(write_spec, tmp_path):
    """Two ``run --next`` released at the same moment on a fresh run directory, again and again: each pair either
    runs or joins (it used to exit 75 about one pair in six). Each waits on states: both processes blocked on
    their stdin until the test writes to both."""
    go = tmp_path / "go"
    go.write_text("go")
    base = joined_spec(write_spec, go)
    gate = "import os, sys; os.read(0, 1); os.execv(sys.executable, [sys.executable, '-m', 'zeus_run', *sys.argv[1:]])"
    for i in range(6):
        where = tmp_path / f"pair{i}"
        where.mkdir()
        spec = where / "job.yaml"
        spec.write_text(base.read_text())
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", gate, "run", str(spec), "--next", "--no-output"],
                cwd=where,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
            for _ in range(2)
        ]
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("x")
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()  # both released together
        outcomes = [(p.wait(timeout=STATE_TIMEOUT_S), p.stderr.read() if p.stderr else "") for p in procs]
        assert [code for code, _ in outcomes] == [0, 0], (i, outcomes)
        recs = records(where / "runs")
        assert sorted(r["recurrence"] for r in recs if r["reached"]) == [1, 2], (i, recs)
