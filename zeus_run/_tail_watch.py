"""The watcher that measures a told trial's tail to its process's exit, from outside the process.

A process that tells its trial itself (the `zeus_run.Job` block, the server's client) may exit after the tell; its
interpreter's teardown after its last exit hook (freeing CUDA, joining threads, unloading modules: seconds with
``torch``) is the trial's, as a launcher charges a script to its exit, and no hook inside the process can read
it. So, once the trial is told, the process starts this watcher (`start`), which opens the same energy source, says
it is ready, waits for the process to be gone, reads the device's counter (`zeus_run.energy.EnergySource.counter`:
the same in every process on the host) and appends the tail from the tell's last reading to then
(`zeus_run.rundir.tails`: to the run directory, or to the server). Where the process asks for its next trial
instead, it stops the watcher and records the tail itself (`zeus_run._process_trials.ProcessTrials.settle`).

Run as ``python -m zeus_run._tail_watch`` with ``ZEUS_TAIL_WATCH`` (JSON: ``pid``, ``fields``, ``at``,
``counter``, ``run_dir`` or ``server`` and ``job``, ``token``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from typing import IO, Any

logger = logging.getLogger(__name__)

#: The environment variable that carries the watcher's orders.
ORDERS = "ZEUS_TAIL_WATCH"
#: How often the watcher looks whether the process is gone (unit: s).
POLL_S = 0.01


class Watcher:
    """A started watcher: its process and the pipe on which it says it is ready."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self._ready = False

    def ready(self) -> bool:
        """Whether it has opened its source (said so on its pipe), without waiting."""
        if self._ready:
            return True
        out: IO[bytes] | None = self.proc.stdout
        if out is None or self.proc.poll() is not None:
            return False
        import select

        with contextlib.suppress(OSError, ValueError):
            if select.select([out], [], [], 0)[0]:
                self._ready = out.readline().strip() == b"ready"
        return self._ready

    def leave(self) -> None:
        """Let it go on alone (the process exits now)."""
        with contextlib.suppress(OSError):
            if self.proc.stdout is not None:
                self.proc.stdout.close()

    def stop(self) -> None:
        """Stop it (the process records the tail itself)."""
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            self.proc.wait(timeout=5)
        self.leave()


def start(orders: dict[str, Any], env: dict[str, str] | None = None) -> Watcher | None:
    """Start a watcher with ``orders`` (see the module docstring); None where it cannot be started."""
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "zeus_run._tail_watch"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **(env or {}), ORDERS: json.dumps(orders)},
            start_new_session=True,
        )
    except OSError as exc:
        logger.info("could not start the watcher of this trial's exit (%s): its tail ends at the exit hook", exc)
        return None
    return Watcher(proc)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except (OSError, IndexError):
        return True


def _deliver(orders: dict[str, Any], spent: tuple[float, float]) -> None:
    if orders.get("run_dir"):
        from zeus_run.rundir.tails import append_tail

        append_tail(orders["run_dir"], orders["token"], *spent, "exit")
    elif orders.get("server"):
        from zeus_run.remote._client import ServerClient, read_token, token_file_from_env

        client = ServerClient(orders["server"], read_token(), token_file=token_file_from_env())
        client.tail(orders["job"], orders["token"], *spent, "exit")


def main() -> int:
    orders = json.loads(os.environ.pop(ORDERS))
    from zeus_run.energy import open_energy_source
    from zeus_run.energy._self import _fields, _settings

    source = open_energy_source(_settings(_fields(orders["fields"])))
    if source.counter() is None:
        return 1
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    pid = int(orders["pid"])
    while _alive(pid):
        time.sleep(POLL_S)
    now, counter = time.time(), source.counter()
    source.close()
    if counter is None:
        return 1
    spent = (max(now - float(orders["at"]), 0.0), max(counter - float(orders["counter"]), 0.0))
    _deliver(orders, spent)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(Exception):
        sys.exit(main())
    sys.exit(1)
