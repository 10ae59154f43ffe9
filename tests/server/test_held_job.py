"""A job whose run directory another process holds: the server answers its requests once it is free, and
answers every other job (and its health) meanwhile: the event loop never waits on another process's lock."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.server.helpers import REPO, AppServer
from tests.server.test_server_jobs import demo_spec
from zeus_run.errors import RunDirBusy
from zeus_run.rundir.lock import WouldWait, first_lock_without_waiting
from zeus_run.rundir.opener import lock

HOLD = (
    "import sys; from pathlib import Path; from zeus_run.rundir.opener import lock\n"
    "with lock(Path(sys.argv[1]), sys.argv[2]):\n"
    "    print('held', flush=True); sys.stdin.readline()\n"
)


def hold(run_dir: Path, role: str = "tell") -> subprocess.Popen:
    """Another process holding ``run_dir``'s lock (as a ``zeus-run tell`` does) until its stdin gets a line."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir), role],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def release(proc: subprocess.Popen) -> None:
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.wait(60) == 0


def test_the_first_lock_of_a_call_that_must_not_wait_raises_would_wait_before_anything_is_done(tmp_path):
    run_dir = tmp_path / "job"
    run_dir.mkdir()
    holder = hold(run_dir)
    try:
        before = sorted(p.name for p in run_dir.iterdir())
        with first_lock_without_waiting(), pytest.raises(WouldWait) as caught:
            lock(run_dir, "ask")
        assert isinstance(caught.value, RunDirBusy) and "pid" in str(caught.value)  # names the holder
        assert sorted(p.name for p in run_dir.iterdir()) == before  # nothing was written
        waited: list[object] = []
        waiter = threading.Thread(target=lambda: waited.append(lock(run_dir, "ask").close()))
        waiter.start()  # outside the block, the same lock waits for a brief holder
        release(holder)
        waiter.join(120)
        assert waited == [None]
    finally:
        if holder.poll() is None:
            holder.kill()
    with first_lock_without_waiting():  # free: taken, and a second lock in the same call waits as usual
        with lock(run_dir, "ask"):
            pass
        with lock(run_dir, "tell"):
            pass


def test_a_held_job_is_answered_once_free_while_other_jobs_and_health_are_answered_meanwhile(server: AppServer):
    client = server.client()
    for name in ("held", "free"):
        client.register(name, demo_spec(5).replace("name: demo", f"name: {name}"))
    holder = hold(server.root / "held")
    answers: list[dict] = []
    # One ask, no second try: a server that waited for the lock on its event loop would block every request
    # behind it and then give up (409 busy after the lock's wait) instead of answering it.
    asking = threading.Thread(target=lambda: answers.append(server.client().ask("held", wait_s=0)))
    try:
        asking.start()
        # While the held job's ask waits on a worker, the loop answers everything else.
        assert client.health()["status"] == "ok"
        free = client.ask("free")
        client.report("free", free["token"], 1, 0.5, 0.01, None)
        assert client.finish("free", free["token"], time_s=0.02)["batch_size"] == free["batch_size"]
        assert not answers and asking.is_alive()  # still waiting for the holder
    finally:
        release(holder)
    asking.join(120)
    assert len(answers) == 1 and answers[0]["recurrence"] == 1
