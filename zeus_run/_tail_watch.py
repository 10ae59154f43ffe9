"""The watcher that measures a told trial's tail to its process's exit, from outside the process.

A process that tells its trial itself (the `zeus_run.Job` block, the server's client) may exit after the tell; its
interpreter's teardown after its last exit hook (freeing CUDA, joining threads, unloading modules: seconds with
``torch``) is the trial's, as a launcher charges a script to its exit, and no hook inside the process can read
it. So when such a process opens its first trial it starts this watcher (`start`), which opens the same energy
source and says it is ready. Once a trial is told, the process sends it the tail's start (`Watcher.order`: the
time and the device's counter, `zeus_run.energy.EnergySource.counter`, the same in every process on the host)
and where the tail goes; at the process's next ask it cancels the order and records the tail itself
(`zeus_run._process_trials.ProcessTrials.settle`). When the process is gone (its end of the pipe closes, or its
pid is gone), the watcher reads the counter and appends the tail of the order it holds
(`zeus_run.rundir.tails`: to the run directory, or to the server, retried as briefly as the process's own). Where it
cannot (the counter cannot be read, the tail cannot be written), it says so in `LOG_NAME` in the run directory and
marks the trial's tail lost (`zeus_run.rundir.tails.record_lost`); a watcher that died before the process is seen
by it (`Watcher.ready`), which then records the tail itself.

Run as ``python -m zeus_run._tail_watch`` with ``ZEUS_TAIL_WATCH`` (JSON: ``pid``, ``fields``); orders on its
standard input, one JSON line each (``mono``: the tail's start on ``CLOCK_MONOTONIC``, the same in every
process; ``counter``, ``token``, and ``run_dir`` or ``server`` and ``job``; ``{}``: none).
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
#: The watcher's log, in the run directory of the trial whose tail it holds (where a tail is lost, it says why).
LOG_NAME = "tail_watch.log"
#: How long a tail sent to a server is retried while the server is unreachable (unit: s).
RETRY_S = 2.0


class Watcher:
    """A started watcher: its process, and the pipes on which it says it is ready and takes its orders.

    Attributes:
        fields: The energy settings it measures with.
    """

    def __init__(self, proc: subprocess.Popen[bytes], fields: dict[str, Any]) -> None:
        self.proc = proc
        self.fields = fields
        self._ready = False

    def ready(self) -> bool:
        """Whether it has opened its source (said so on its pipe) and is still alive, without waiting: a watcher
        that died since leaves the tail to the process itself."""
        if self.proc.poll() is not None:
            return False
        if self._ready:
            return True
        out: IO[bytes] | None = self.proc.stdout
        if out is None:
            return False
        import select

        with contextlib.suppress(OSError, ValueError):
            if select.select([out], [], [], 0)[0]:
                self._ready = out.readline().strip() == b"ready"
        return self._ready

    def order(self, orders: dict[str, Any]) -> bool:
        """Send the tail it measures at the exit (``{}``: none); False where it is gone."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(orders) + "\n").encode())
            self.proc.stdin.flush()
        except (OSError, ValueError, AssertionError):
            return False
        return True

    def stop(self) -> None:
        """Stop it (the process records its tails itself from now on)."""
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            self.proc.wait(timeout=5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()


def start(fields: dict[str, Any], env: dict[str, str] | None = None) -> Watcher | None:
    """Start a watcher of this process measuring with ``fields`` (``env``: what it needs besides this process's
    environment, e.g. the server's token); None where it cannot be started."""
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "zeus_run._tail_watch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **(env or {}), ORDERS: json.dumps({"pid": os.getpid(), "fields": fields})},
            start_new_session=True,
        )
    except OSError as exc:
        logger.info("could not start the watcher of this process's exit (%s): a tail ends at its exit hook", exc)
        return None
    return Watcher(proc, fields)


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
        from zeus_run.rundir.tails import record_tail

        record_tail(orders["run_dir"], orders["token"], *spent, "exit")
    elif orders.get("server"):
        from zeus_run.remote import ServerClient, read_token, token_file_from_env

        # Retried as briefly as the process's own tail is (`zeus_run.remote`'s ``TAIL_RETRY_S``), not minutes.
        client = ServerClient(orders["server"], read_token(), retry_s=RETRY_S, token_file=token_file_from_env())
        try:
            client.tail(orders["job"], orders["token"], *spent, "exit")
        finally:
            client.close()


def _lost(orders: dict[str, Any], why: str) -> None:
    """The tail of the order held could not be measured or recorded: logged where a user looks (`LOG_NAME` in the
    run directory), and marked on the trial (`zeus_run.rundir.tails.record_lost`) where the run directory is
    here."""
    logger.warning("trial %s: its tail to the process's exit is lost: %s", orders.get("token"), why)
    if orders.get("run_dir") and orders.get("token"):
        from zeus_run.rundir.tails import record_lost

        record_lost(orders["run_dir"], orders["token"], why)


def _log_to(orders: dict[str, Any]) -> None:
    """Log into the run directory's `LOG_NAME` (this process's stderr goes nowhere: its parent is gone)."""
    if not orders.get("run_dir") or logging.getLogger().handlers:
        return
    handler = logging.FileHandler(os.path.join(orders["run_dir"], LOG_NAME), delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)


def main() -> int:
    import select

    setup = json.loads(os.environ.pop(ORDERS))
    from zeus_run.energy import meter_settings, open_energy_source

    source = open_energy_source(meter_settings(setup["fields"]))
    if source.counter() is None:
        return 1
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    pid, orders, pending = int(setup["pid"]), {}, b""
    stdin = sys.stdin.buffer.raw if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer
    fd = stdin.fileno()
    while True:
        readable = select.select([fd], [], [], POLL_S)[0]
        if readable:
            chunk = os.read(fd, 65536)
            if not chunk:  # the process is gone (its end of the pipe closed)
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                with contextlib.suppress(ValueError):
                    orders = json.loads(line)
        elif not _alive(pid):
            break
    if not orders.get("token"):
        return 0
    _log_to(orders)
    now = time.monotonic()
    try:
        counter = source.counter()
    except Exception as exc:  # the device's error at the exit
        counter, why = None, f"the energy counter could not be read at the exit ({exc})"
    else:
        why = "the energy counter could not be read at the exit"
    with contextlib.suppress(Exception):
        source.close()
    if counter is None:
        _lost(orders, why)
        return 1
    spent = (max(now - float(orders["mono"]), 0.0), max(counter - float(orders["counter"]), 0.0))
    try:
        _deliver(orders, spent)
    except Exception as exc:  # a full disk, the server gone: never silent
        _lost(orders, f"its {spent[0]:.1f} s, {spent[1]:.1f} J could not be recorded: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # logged where it can be (the run directory, once an order named one)
        logger.exception("the watcher of a process's exit failed")
        sys.exit(1)
