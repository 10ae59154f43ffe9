"""``zeus-run run`` with a ``start`` section: it waits for the clean slot with a live line; SIGTERM while waiting
ends it with no trial started and nothing lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.factories import job_spec
from tests.start.helpers import DAY, history, write_csv

#: Bound on each wait for a state of the launcher (it imports, plans, then prints its line).
BOUND = 60.0


def wait_for(check, what: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + BOUND
    while not check():
        if proc.poll() is not None:
            pytest.fail(f"the launcher exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {BOUND:g} s waiting for {what}")
        time.sleep(0.1)


def test_sigterm_while_waiting_ends_the_run_with_no_trial_started(tmp_path: Path) -> None:
    now = time.time()
    # Every day: 300 g/kWh, and 100 from two to four hours after this moment; rows only where the value steps.
    times, values = [], []
    for k in range(-20, 3):
        day = now + k * DAY
        times += [day, day + 2 * 3600, day + 4 * 3600]
        values += [300.0, 100.0, 300.0]
    write_csv(tmp_path / "grid.csv", times, values)
    run_dir = tmp_path / "runs"
    history(run_dir, [3600.0] * 6, now)
    before = (run_dir / "history.jsonl").read_bytes()
    spec = tmp_path / "job.yaml"
    spec.write_text(job_spec("start: {within: 8h, forecast: {csv: grid.csv}}\n", recurrences=None))
    err = tmp_path / "stderr.txt"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with open(err, "wb") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "zeus_run", "run", str(spec), "--next"], cwd=tmp_path, stderr=f, stdout=f, env=env
        )
    try:
        wait_for(lambda: b"waiting until" in err.read_bytes(), "its waiting line", proc)
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + BOUND
        while proc.poll() is None:
            if time.monotonic() > deadline:
                pytest.fail(f"the launcher did not exit within {BOUND:g} s of SIGTERM")
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = err.read_text()
    assert proc.returncode == 128 + signal.SIGTERM, text
    assert "for 100 g/kWh, now 300; due" in text  # the live line: the clean slot's intensity, now's, the deadline
    assert "no trial started" in text and "Traceback" not in text
    assert (run_dir / "history.jsonl").read_bytes() == before  # nothing run, nothing lost
    assert sorted(p.name for p in run_dir.iterdir()) == ["history.jsonl", "starts.jsonl"]
    events = [json.loads(line) for line in (run_dir / "starts.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["plan", "interrupted"] and events[1]["signal"] == "SIGTERM"
    assert events[0]["moved"] is True


def test_a_slurm_job_is_submitted_with_begin_instead_of_a_waiting_process(tmp_path: Path) -> None:
    import dataclasses

    from zeus_run.cli._wait import with_begin
    from zeus_run.spec import load_spec
    from zeus_run.start import Plan

    spec_path = tmp_path / "job.yaml"
    spec_path.write_text(
        job_spec("start: {within: 8h, forecast: none}\nexecutor: {kind: slurm, extra_args: ['--mem=4G']}\n")
    )
    spec = load_spec(spec_path)
    now = time.time()
    moved = Plan(now, now + 8 * 3600, now + 3 * 3600, True, "test")
    held = with_begin(spec, moved)
    begin = [a for a in held.executor.extra_args if a.startswith("--begin=now+")]
    assert held.executor.extra_args[0] == "--mem=4G" and len(begin) == 1
    assert abs(int(begin[0].split("+")[1]) - 3 * 3600) <= 5
    assert with_begin(spec, dataclasses.replace(moved, moved=False)) is spec  # on time: nothing added
    assert with_begin(held, dataclasses.replace(moved, moved=False)).executor.extra_args == ("--mem=4G",)  # nor kept
    local = dataclasses.replace(spec, executor=dataclasses.replace(spec.executor, kind="local", extra_args=()))
    assert with_begin(local, moved) is local  # a local executor waits in the launcher instead
