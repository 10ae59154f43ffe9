"""The watcher of a `Job` process's exit never loses a tail in silence (issue 54, 3).

A process that tells its trials itself leaves a watcher (`zeus_run._tail_watch`) that reads the device's counter
when the process is gone. Where the counter cannot be read then (the NVML double's counter fails after the tell),
the trial's record says its tail is lost, and the run directory's ``tail_watch.log`` says why; before, nothing was
written and nothing logged. Waited for with a bound that fails with a message.
"""

from __future__ import annotations

import time

import pytest

from tests.doors import helpers
from tests.doors.window import Room, _setup, _sh

#: How long the watcher may take to see the process gone and write (unit: s), on a loaded machine.
WAIT_S = 60.0

JOB_SCRIPT = """
import os, pathlib, sys, time
import zeus_run
from zeus_run._process_trials import PROCESS

job = zeus_run.Job(sys.argv[1])
with job.ask() as trial:
    deadline = time.monotonic() + 60
    while not (PROCESS.watcher and PROCESS.watcher.ready()):  # the watcher has opened its source
        assert time.monotonic() < deadline, "the watcher never said it was ready"
        time.sleep(0.02)
    for epoch in trial.epochs():
        trial.report(0.95)
if sys.argv[2] == "watcher-died":
    PROCESS.watcher.stop()  # the process must see it gone and take the tail itself
pathlib.Path(os.environ["FAKE_NVML_FAIL_COUNTER"]).touch()  # the device fails after the tell
"""


@pytest.mark.parametrize("case", ["watcher", "watcher-died"])
def test_a_tail_that_cannot_be_measured_is_marked_lost_and_logged(tmp_path, case):
    """The counter fails after the tell: the watcher (alive) marks the tail lost and logs why in the run
    directory; a watcher that died is seen dead at the exit, and the process marks it lost itself."""
    room = Room(tmp_path)
    spec, run_dir = _setup(room)
    script = tmp_path / "job_script.py"
    script.write_text(JOB_SCRIPT)
    fail = tmp_path / "counter-fails"
    _sh(f"{helpers.PYTHON} {script} {spec} {case}", room, FAKE_NVML_FAIL_COUNTER=str(fail))
    assert fail.exists()
    deadline = time.monotonic() + WAIT_S
    while True:
        (record,) = helpers.history(run_dir)
        window = record.window or {}
        if window.get("tail") == "lost" or "tail_s" in window:
            break
        assert time.monotonic() < deadline, f"no tail and no 'tail lost' marker {WAIT_S:.0f} s after the exit: {window}"
        time.sleep(0.05)
    assert window.get("tail") == "lost" and "could not be read" in window["tail_why"], window
    assert record.after_energy is None or "tail_s" not in window, record  # nothing made up
    if case == "watcher":
        log = (run_dir / "tail_watch.log").read_text()
        assert record.provenance is not None and record.provenance["ask_token"] in log and "lost" in log, log


TOLD_FAILS = """
import sys, time
import zeus_run
import zeus_run.asktell._job as job_module

real = job_module.tell
calls = []


def tell(*args, **kwargs):
    calls.append(1)
    if len(calls) == 1:
        raise OSError(28, "No space left on device")  # the first trial's tell fails
    return real(*args, **kwargs)


job_module.tell = tell
job = zeus_run.Job(sys.argv[1])
try:
    with job.ask() as trial:
        for epoch in trial.epochs():
            trial.report(0.95)
except OSError:
    pass
time.sleep(1.0)  # the first trial's after-work: no trial's
with job.ask() as trial:
    for epoch in trial.epochs():
        trial.report(0.95)
"""


def test_a_block_whose_tell_failed_does_not_charge_its_after_work_to_the_next_trial(tmp_path):
    """Issue 54, 6: the second trial's window opened at the first one's close (its after-work included) when the
    first one's tell raised; it opens at its own ask."""
    room = Room(tmp_path, spec_extra="concurrency: 2")  # the first ask, never told, stays in flight
    spec, run_dir = _setup(room)
    script = tmp_path / "told_fails.py"
    script.write_text(TOLD_FAILS)
    _sh(f"{helpers.PYTHON} {script} {spec}", room)
    records = helpers.history(run_dir)
    second = records[-1]
    assert second.window is not None and second.window["from"] == "ask", second.window
    assert second.time < 1.0, second  # not the second of after-work before its ask


CRASHES = """
import time
from zeus_run._process_trials import PROCESS
from zeus_run.train import Trial

trial = Trial.from_env()
deadline = time.monotonic() + 60
while not (PROCESS.watcher and PROCESS.watcher.ready()):  # a real trial runs longer than the watcher's start
    assert time.monotonic() < deadline, "the watcher never said it was ready"
    time.sleep(0.02)
for epoch in trial.epochs():
    trial.report(0.5)
    break
raise RuntimeError("the script crashed")  # told at the exit by the client's hook; the teardown follows
"""


def test_a_crashed_server_client_trial_is_charged_its_teardown_after_the_tell(tmp_path):
    """Issue 54, 6: a server-client trial that crashed was told at its exit hook and not charged the teardown
    after it (job_life.py: its last 0.11 s, -5.6%); the exit watcher measures it as the trial's tail."""
    pytest.importorskip("fastapi", reason="the server extra is not installed: pip install -e '.[server]'")
    pytest.importorskip("uvicorn", reason="the server extra is not installed: pip install -e '.[server]'")
    from tests.doors.window import _env
    from tests.server.helpers import ServerProcess
    from zeus_run.contract import Env
    from zeus_run.records import TrialRecord

    room = Room(tmp_path)
    spec, _ = _setup(room)
    script = tmp_path / "crashes.py"
    script.write_text(CRASHES)
    from tests.doors.window import SCRIPT

    server = ServerProcess(tmp_path / "root", extra=("--allow-path", str(SCRIPT.parent)), env=_env(room))
    try:
        client = server.client()
        client.register("crashes", spec.read_text().replace("name: window", "name: crashes"))
        env = {Env.SERVER: server.url, Env.SERVER_TOKEN: server.token, Env.SERVER_JOB: "crashes"}
        r = helpers.sh(f"{helpers.PYTHON} {script}", tmp_path, **_env(room, **env))
        assert r.returncode == 1 and "the script crashed" in r.stderr, r.stderr
        (record,) = helpers.with_tails(lambda: [TrialRecord.from_json(x) for x in client.history("crashes")], 1)
    finally:
        server.stop()
    assert record.stop_reason == "crashed" or not record.reached, record
    assert record.window is not None and record.window.get("tail_s", 0) > 0, record.window
    assert record.window["to"] == "exit", record.window
