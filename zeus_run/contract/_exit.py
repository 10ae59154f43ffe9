"""How this process is about to end, seen from inside it (standard library only).

A training script that nothing watches (a plain ``zeus-run tell`` after it, the batch-size server's
client) reports its own end from an ``atexit`` hook, where Python no longer says why it is exiting.
`ExitWatch` keeps what the launcher would have seen on the way there:

* the code `sys.exit` was called with (from the main thread: a thread's ``sys.exit`` ends only the
  thread), or an uncaught exception (the interpreter prints it, and keeps it in ``sys.last_value``,
  before ``atexit`` runs);
* the last lines the script printed (what goes through ``sys.stdout`` and ``sys.stderr``: ``print``,
  ``logging``, the traceback of an uncaught exception), passed on unchanged, so that a crash's record
  carries its cause (``RuntimeError: CUDA out of memory``) as the launcher's log tail does.

``os._exit`` and signals end a process without ``atexit``: nothing is reported then, and the tell or the
lease says what happened. Output written below Python (a C library's own ``printf``) is not seen.

After the last ``atexit`` hook the interpreter still tears itself down (with PyTorch loaded, seconds on a busy
machine), which a launcher counts up to the exit. `watch_exit` leaves a tiny watcher (``/bin/sh``) that appends
an ``exited`` event with the moment the process is gone; `ScriptEnd` reads a script's ``end`` readings (its close,
its exit) and carries the exit's reading to that moment at the power it read then.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import threading
from collections import deque
from dataclasses import dataclass
from typing import IO, Any

#: Most characters of output kept (the last ones).
TAIL_CHARS = 4000
#: Most lines of output a report carries (the last ones).
TAIL_LINES = 40
#: Exit code of a process ended by an uncaught ``KeyboardInterrupt`` (as a shell reports SIGINT).
INTERRUPTED_EXIT_CODE = 130

_NOT_CALLED = object()


def exit_status(code: object) -> int:
    """The status a process that called ``sys.exit(code)`` ends with: None 0, a whole number its low 8 bits
    (as the operating system keeps them), anything else (a message) 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code) & 0xFF
    return 1


class _Tail:
    """The last `TAIL_CHARS` characters written, thread-safe."""

    def __init__(self) -> None:
        self._parts: deque[str] = deque()
        self._size = 0
        self._lock = threading.Lock()

    def add(self, text: str) -> None:
        if not text:
            return
        with self._lock:
            self._parts.append(text[-TAIL_CHARS:])
            self._size += len(self._parts[-1])
            while self._size - len(self._parts[0]) >= TAIL_CHARS:
                self._size -= len(self._parts.popleft())

    def text(self) -> str:
        with self._lock:
            joined = "".join(self._parts)[-TAIL_CHARS:]
        return "\n".join(joined.splitlines()[-TAIL_LINES:])


class _TailStream:
    """A text stream that passes everything to ``stream`` and keeps a copy of its end in ``tail``."""

    def __init__(self, stream: IO[str], tail: _Tail) -> None:
        self._zeus_stream = stream
        self._zeus_tail = tail

    def write(self, text: str) -> int:
        n = self._zeus_stream.write(text)
        with contextlib.suppress(Exception):  # never let the copy break the script's output
            self._zeus_tail.add(text if isinstance(text, str) else str(text))
        return n

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, flush, buffer, encoding ...
        return getattr(self._zeus_stream, name)


class ExitWatch:
    """What this process's exit will be: its code and its last output (see the module docstring).

    One per process (`exit_watch`); `install` is idempotent.
    """

    def __init__(self) -> None:
        self._requested: object = _NOT_CALLED
        self._tail = _Tail()
        self._installed = False
        self._lock = threading.Lock()

    def install(self) -> None:
        """Start watching: wrap ``sys.exit``, and ``sys.stdout`` and ``sys.stderr`` with a copy of their end."""
        with self._lock:
            if self._installed:
                return
            self._installed = True
            real_exit = sys.exit

            def watched_exit(status: object = None) -> Any:
                if threading.current_thread() is threading.main_thread():
                    self._requested = status
                return real_exit(status)  # type: ignore[arg-type]

            sys.exit = watched_exit
            for name in ("stdout", "stderr"):
                stream = getattr(sys, name, None)
                if stream is not None and not isinstance(stream, _TailStream):
                    setattr(sys, name, _TailStream(stream, self._tail))

    def uncaught(self) -> BaseException | None:
        """The exception that is ending the process (the interpreter printed it), None if none (``SystemExit``
        is no such exception: it is an exit)."""
        exc = getattr(sys, "last_value", None)
        return None if exc is None or isinstance(exc, SystemExit) else exc

    def code(self) -> int:
        """The exit status the process is ending with, as far as Python shows it (0: nothing says otherwise)."""
        exc = self.uncaught()
        if isinstance(exc, KeyboardInterrupt):
            return INTERRUPTED_EXIT_CODE
        if exc is not None:
            return 1
        return 0 if self._requested is _NOT_CALLED else exit_status(self._requested)

    def output(self) -> str:
        """The last lines the process printed (empty before `install`, or if it printed nothing)."""
        return self._tail.text()

    def failure(self, limit: int = 2000) -> str:
        """The launcher's account of a failed exit, within ``limit`` characters: ``exit code 1; last output:``
        and the output's last lines (its start cut, never its end)."""
        head = f"exit code {self.code()}; last output:\n"
        out = self.output()
        exc = self.uncaught()
        if exc is not None and f"{type(exc).__name__}: {exc}" not in out:  # its traceback was not seen
            out = f"{out}\n{type(exc).__name__}: {exc}".strip()
        return head + (out or "(no output)")[-max(limit - len(head), 0) :]


_WATCH: list[ExitWatch] = []
_WATCH_LOCK = threading.Lock()


def exit_watch() -> ExitWatch:
    """This process's `ExitWatch` (made on first use; `ExitWatch.install` starts it)."""
    with _WATCH_LOCK:
        if not _WATCH:
            _WATCH.append(ExitWatch())
        return _WATCH[0]


#: How often the exit watcher looks whether the process is gone (unit: s).
EXIT_POLL_S = 0.05
#: The exit watcher: waits for pid $1 to be gone, then appends an ``exited`` event to the file $2.
_WATCHER = (
    'while kill -0 "$1" 2>/dev/null; do sleep {poll}; done; t=$(date +%s.%N); case $t in *N) t=$(date +%s);; esac; '
    'printf \'{{"event": "exited", "time": %s}}\\n\' "$t" >> "$2"'
)


def watch_exit(event_log: str) -> None:
    """Leave a watcher that appends an ``exited`` event to ``event_log`` the moment this process is gone (see the
    module docstring); nothing where no ``/bin/sh`` can be started."""
    with contextlib.suppress(OSError):
        subprocess.Popen(
            ["/bin/sh", "-c", _WATCHER.format(poll=EXIT_POLL_S), "zeus-run-exit", str(os.getpid()), event_log],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )


def _number(value: Any) -> float | None:
    """A finite, non-negative number from the script's events, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    return f if math.isfinite(f) and f >= 0 else None


@dataclass
class ScriptEnd:
    """How a script that told its own end ended, from its ``end`` and ``exited`` events (untrusted; see the module
    docstring).

    Attributes:
        reading: Its last reading, time and energy since its trial began (units: s, J; energy None: not measured);
            None: no ``end`` event. An exit's reading is not replaced by a later close's.
        at: Where that reading was taken: ``close`` or ``exit``.
        exit_code: The exit code it saw at its exit (None: not said).
        output: Its last output, if it failed.
        carried: Time and energy (units: s, J) the exit's reading was carried to the ``exited`` moment, None if not.
    """

    reading: tuple[float, float | None] | None = None
    at: str | None = None
    exit_code: int | None = None
    output: str | None = None
    carried: tuple[float, float] | None = None
    _exit: tuple[float, float] | None = None  # the exit reading's (time, power), until an ``exited`` event

    def take(self, event: dict[str, Any], when: float | None) -> None:
        """Read one ``end`` or ``exited`` event written at ``when`` (Unix time)."""
        if event.get("event") == "exited":
            if self._exit is not None and self.reading is not None and when is not None and when > self._exit[0]:
                gap, power = when - self._exit[0], self._exit[1]
                energy = self.reading[1]
                self.reading = (self.reading[0] + gap, None if energy is None else energy + power * gap)
                self.carried, self._exit = (gap, power * gap), None
            return
        elapsed = _number(event.get("elapsed"))
        at = event.get("at") if event.get("at") in ("close", "exit") else "close"
        if elapsed is None or (self.at == "exit" and at != "exit"):
            return
        self.reading, self.at = (elapsed, _number(event.get("energy"))), at
        watts = _number(event.get("power"))
        self._exit = (when, watts) if at == "exit" and when is not None and watts is not None else None
        code = event.get("exit_code")
        if isinstance(code, int) and not isinstance(code, bool) and -255 <= code <= 255:
            self.exit_code = code
        if isinstance(event.get("output"), str):
            self.output = event["output"][-TAIL_CHARS:]
