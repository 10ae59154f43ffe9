"""The test session's reaper: once the session's pytest process is gone, however it ended (a normal end, Ctrl-C,
SIGTERM, SIGKILL), end every process that still carries the session's mark, so that an interrupted run leaves no
process behind (a Slurm double's monitor, a trial agent, a server, a training script).

tests/conftest.py starts it (``python tests/reaper.py PID MARK``) in a session of its own, with ``ZEUS_RUN_TEST_SESSION``
set to MARK in the environment every process of the run inherits; the reaper's own environment lacks it. Linux only
(/proc); elsewhere it exits at once.
"""

from __future__ import annotations

import os
import select
import signal
import sys
from pathlib import Path

MARK_VAR = "ZEUS_RUN_TEST_SESSION"


def marked(mark: str) -> list[int]:
    """The processes whose environment holds ``ZEUS_RUN_TEST_SESSION=mark`` (this user's; others are unreadable)."""
    needle = f"{MARK_VAR}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def wait_gone(pid: int) -> None:
    """Return once ``pid`` has ended."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        select.select([fd], [], [])  # readable when the process ends
    finally:
        os.close(fd)


def main() -> None:
    pid, mark = int(sys.argv[1]), sys.argv[2]
    if not sys.platform.startswith("linux"):
        return
    wait_gone(pid)
    for _ in range(20):  # what is being ended may have started more meanwhile
        left = marked(mark)
        if not left:
            return
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


if __name__ == "__main__":
    main()
