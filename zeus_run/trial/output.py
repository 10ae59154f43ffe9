"""Where a trial's stdout and stderr go: a pipe (the default) or a pseudo-terminal (``stdout: pty``).

Many programs choose their buffering by what their output is: C's stdio, and
Python without ``PYTHONUNBUFFERED``, write a terminal line by line and a pipe
in blocks of 4-8 KiB, so through a pipe every epoch's line can reach zeus-run
only when the program exits. ``stdout: pty`` gives the script a pseudo-terminal
instead (`os.openpty`), so such a program writes each line as it prints it.

Either way the script's stderr goes to the same place as its stdout, zeus-run
reads one file descriptor without blocking, and the end of output is the end
of file (a pipe) or ``EIO`` once every process holding the terminal has closed
it (a pty; `zeus_run.trial.run` takes any read error as the end).

The terminal is configured so that the log holds what the script wrote: no
``\\n`` to ``\\r\\n`` translation (``OPOST`` off) and no echo; the program is not
given it as its controlling terminal (it runs in a session of its own, and
its input stays ``/dev/null``). Escape sequences a program sends because it sees
a terminal (colours, cursor movement) are removed from what zeus-run logs and
matches (`EscapeFilter`); ``TERM=dumb`` (`zeus_run.trial.launch.PTY_DEFAULTS`)
asks for none in the first place.

Under a pipe the script does not write into zeus-run's pipe itself but through a relay (GNU ``tee -p
/dev/null``, a process of its own session that ignores ``SIGPIPE``): while the launcher lives it passes every
byte on; once the launcher is gone (``kill -9``) it goes on reading and drops the output, so a script that
prints every epoch runs to its end as one that prints nothing does (its epochs are in its event log, where
the next trigger adopts them). Without the script's pipe tied to the launcher's life, an orphan does not die
of ``BrokenPipeError`` at its next print. Where no such ``tee`` is found, the script writes into the pipe.
A pseudo-terminal ends with the launcher (its other end closes), and so does a script that writes to it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import re
import shutil
import struct
import subprocess
import termios
from typing import IO

from zeus_run.contract import STDOUT_MODES

logger = logging.getLogger(__name__)

#: Longest wait for the relay to end once the output ended (unit: s).
RELAY_WAIT_S = 5.0

#: The terminal's size as the script sees it (rows, columns): wide, so progress bars do not wrap.
PTY_SIZE = (50, 200)

# A complete escape sequence: CSI (ESC [ ... final), an OSC/DCS/SOS/PM/APC string ended by BEL or ST,
# or another escape (ESC, intermediates, final). `zeus_run._terminal` does the same for text it echoes.
_COMPLETE = re.compile(
    rb"\x1b\[[0-?]*[ -/]*[@-~]"
    rb"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)"
    rb"|\x1b(?![\[\]PX^_])[ -/]*[0-~]"
)
#: Longest unfinished escape sequence held back for the next chunk; longer is not an escape sequence.
_HOLD_LIMIT = 4096


class EscapeFilter:
    """Removes terminal escape sequences from a byte stream, also when one is split across reads."""

    def __init__(self) -> None:
        self._held = b""

    def feed(self, chunk: bytes) -> bytes:
        """``chunk`` without escape sequences; an unfinished one at its end is kept for the next chunk."""
        data = _COMPLETE.sub(b"", self._held + chunk)
        self._held = b""
        esc = data.rfind(b"\x1b")
        if esc >= 0 and len(data) - esc <= _HOLD_LIMIT:
            data, self._held = data[:esc], data[esc:]
        return data

    def flush(self) -> bytes:
        """What is held at the end of output (an escape sequence that never finished), without its ESC."""
        held, self._held = self._held, b""
        return held.replace(b"\x1b", b"")


class OutputChannel:
    """The trial's output, from its start (`child`, handed to ``Popen``) to the end of reading (`close`).

    Args:
        mode: ``pipe`` or ``pty``.
    """

    def __init__(self, mode: str) -> None:
        if mode not in STDOUT_MODES:
            raise ValueError(f"stdout = {mode!r}: not one of {', '.join(STDOUT_MODES)}")
        self.mode = mode
        self._master = -1
        self._slave = -1
        self._pipe: IO[bytes] | None = None
        self._relay: subprocess.Popen[bytes] | None = None
        self.filter = EscapeFilter() if mode == "pty" else None
        if mode == "pty":
            self._master, self._slave = os.openpty()  # both not inheritable; Popen dup2()s the slave
            _raw_output(self._slave)
        elif (argv := relay_argv()) is not None:
            self._relay, self._slave = _start_relay(argv)

    @property
    def child(self) -> int:
        """What the script's stdout and stderr are: the pty's terminal end, the relay's input, or a new pipe."""
        return self._slave if self._slave >= 0 else subprocess.PIPE

    def started(self, proc: subprocess.Popen) -> int:
        """The script started: close its end here (only the script holds it now); the fd to read."""
        if self.mode == "pipe":
            self._close_slave()
            source = self._relay.stdout if self._relay is not None else proc.stdout
            assert source is not None
            self._pipe = source
            return source.fileno()
        self._close_slave()
        return self._master

    def clean(self, chunk: bytes) -> bytes:
        """What of a chunk read is logged and matched (under a pty: without escape sequences)."""
        return chunk if self.filter is None else self.filter.feed(chunk)

    def rest(self) -> bytes:
        """What `clean` still holds at the end of output."""
        return b"" if self.filter is None else self.filter.flush()

    def close(self) -> None:
        """Close every descriptor this channel still holds (safe to call more than once)."""
        self._close_slave()
        if self._master >= 0:
            with contextlib.suppress(OSError):
                os.close(self._master)
            self._master = -1
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None
        if self._relay is not None:
            relay, self._relay = self._relay, None
            if relay.stdout is not None:
                relay.stdout.close()
            try:
                relay.wait(RELAY_WAIT_S)  # it ends at the end of the script's output
            except subprocess.TimeoutExpired:
                relay.kill()
                relay.wait()

    def _close_slave(self) -> None:
        if self._slave >= 0:
            with contextlib.suppress(OSError):
                os.close(self._slave)
            self._slave = -1


@functools.cache
def relay_argv() -> tuple[str, ...] | None:
    """The relay's command (GNU ``tee -p /dev/null``: it ignores SIGPIPE and goes on reading once its reader is
    gone), or None where this ``tee`` does not take ``-p`` (BusyBox, BSD)."""
    tee = shutil.which("tee", path=os.defpath + os.pathsep + os.environ.get("PATH", ""))
    if tee is None:
        return None
    argv = (tee, "-p", os.devnull)
    try:
        ok = subprocess.run(argv, input=b"", capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    if not ok:
        logger.info("no tee that takes -p here: a script's output is piped to zeus-run without a relay")
    return argv if ok else None


def _start_relay(argv: tuple[str, ...]) -> tuple[subprocess.Popen[bytes], int]:
    """The relay started; the write end of its input (for the script's stdout and stderr)."""
    read, write = os.pipe()  # both not inheritable; Popen dup2()s the read end
    try:
        relay = subprocess.Popen(
            list(argv),
            stdin=read,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a signal to the launcher's group is not the relay's
            bufsize=0,
        )
    except OSError:
        os.close(write)
        raise
    finally:
        os.close(read)
    return relay, write


def _raw_output(fd: int) -> None:
    """Output as written (no ``\\r\\n`` for ``\\n``), no echo, and a wide window."""
    attrs = termios.tcgetattr(fd)
    attrs[1] &= ~termios.OPOST  # oflag
    attrs[3] &= ~(termios.ECHO | termios.ICANON)  # lflag
    termios.tcsetattr(fd, termios.TCSANOW, attrs)
    with contextlib.suppress(OSError):
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", PTY_SIZE[0], PTY_SIZE[1], 0, 0))
