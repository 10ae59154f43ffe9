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

Under a pipe the script does not write into zeus-run's pipe itself but through a relay (`RELAY`: a few lines of
Python run as ``python -I -S -c``, a process of its own session that ignores ``SIGPIPE`` and ``SIGINT``; no GNU
``tee`` needed). The relay writes every chunk into the trial's ``output.log`` first (the launcher hands it the
open log), then passes it on to the launcher; once the launcher is gone (``kill -9``) it goes on writing the log
alone and notes, in ``output.times``, where the log stood and when. So a script that prints every epoch runs to
its end as one that prints nothing does, its output is all in its log, and the next trigger reads the epochs it
reached from there (or from its event log) and adopts them (`zeus_run.trial.orphan`). Without the script's pipe
tied to the launcher's life, an orphan does not die of ``BrokenPipeError`` at its next print. Where no Python
interpreter can be started for the relay (``sys.executable`` unknown), the script writes into the pipe, a
warning says once that an orphan then dies with its launcher, and the launcher writes the log.
A pseudo-terminal ends with the launcher (its other end closes), and so does a script that writes to it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import IO

from zeus_run.contract import STDOUT_MODES
from zeus_run.trial.log import TrialLog

logger = logging.getLogger(__name__)

#: Longest wait for the relay to end once the output ended (unit: s).
RELAY_WAIT_S = 5.0

#: The relay (argv: the log's file descriptor, ``output.times``'s path). It writes each chunk of the script's
#: output into the log, then to the launcher; after the launcher is gone (a write to it fails) into the log alone,
#: with a line ``OFFSET TIME`` in ``output.times`` per chunk (the first line: where this trial's output starts in
#: the log and when the relay started), and a last one at the end of the output. It exits with the ``errno`` of a
#: write into the log that failed (the launcher says so), else 0. Kept small: it starts once per trial.
RELAY = """
import _signal,os,sys,time
_signal.signal(_signal.SIGINT,_signal.SIG_IGN)
_signal.signal(_signal.SIGPIPE,_signal.SIG_IGN)
t0=time.time();log=int(sys.argv[1]);times=sys.argv[2];out=1;err=0;pos=0;st=-1
def put(fd,b):
    while b:b=b[os.write(fd,b):]
def stamp(t):
    global st
    try:
        if st==-1:
            st=os.open(times,os.O_WRONLY|os.O_CREAT|os.O_TRUNC|os.O_NOFOLLOW|os.O_CLOEXEC,0o644)
            os.fchmod(st,0o644)
            put(st,b"%d %.3f\\n"%(pos0,t0))
        if st>=0:put(st,b"%d %.3f\\n"%(pos,t))
    except OSError:st=-2
try:pos=os.fstat(log).st_size
except OSError:log=-1
pos0=pos
while True:
    b=os.read(0,65536)
    if not b:break
    if log>=0:
        try:put(log,b);pos+=len(b)
        except OSError as e:err=e.errno or 5;log=-1
    if out>=0:
        try:put(out,b)
        except OSError:out=-1
    if out<0 and log>=0:stamp(time.time())
if out<0 and log>=0:stamp(time.time())
sys.exit(min(err,255))
"""

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
        log: The trial's open log; under a pipe with a relay the relay writes it (`TrialLog.hand_over`).
        times: Where the relay notes the log's offsets once the launcher is gone (``output.times``).
    """

    def __init__(self, mode: str, log: TrialLog | None = None, times: Path | None = None) -> None:
        if mode not in STDOUT_MODES:
            raise ValueError(f"stdout = {mode!r}: not one of {', '.join(STDOUT_MODES)}")
        self.mode = mode
        self._master = -1
        self._slave = -1
        self._pipe: IO[bytes] | None = None
        self._relay: subprocess.Popen[bytes] | None = None
        self._log = log
        self.filter = EscapeFilter() if mode == "pty" else None
        if mode == "pty":
            self._master, self._slave = os.openpty()  # both not inheritable; Popen dup2()s the slave
            _raw_output(self._slave)
        elif (argv := relay_argv()) is not None:
            fd = log.hand_over() if log is not None else -1
            try:
                self._relay, self._slave = _start_relay(argv, fd, times)
            except OSError:
                if log is not None:
                    log.take_back()
                raise

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
                code = relay.wait(RELAY_WAIT_S)  # it ends at the end of the script's output
            except subprocess.TimeoutExpired:
                relay.kill()
                code = relay.wait()
            if self._log is not None:
                if code > 0:  # the errno of its failed write into the log
                    self._log.failed(OSError(code, os.strerror(code)))
                self._log.take_back()

    def _close_slave(self) -> None:
        if self._slave >= 0:
            with contextlib.suppress(OSError):
                os.close(self._slave)
            self._slave = -1


@functools.cache
def relay_argv() -> tuple[str, ...] | None:
    """The relay's command (`RELAY` under this interpreter, isolated and without ``site``: a few ms to start), or
    None where no interpreter can be started for it (then a warning, once)."""
    if sys.executable and os.access(sys.executable, os.X_OK):
        return (sys.executable, "-I", "-S", "-c", RELAY)
    logger.warning(
        "no Python interpreter to start the output's relay (sys.executable is %r): a script's output is piped "
        "to zeus-run directly, so a script that prints dies with a launcher killed under it (kill -9) and its "
        "trial is run again",
        sys.executable,
    )
    return None


def _start_relay(argv: tuple[str, ...], log: int, times: Path | None) -> tuple[subprocess.Popen[bytes], int]:
    """The relay started (writing into ``log``, an open file descriptor, or nowhere with -1); the write end of its
    input (for the script's stdout and stderr)."""
    read, write = os.pipe()  # both not inheritable; Popen dup2()s the read end
    try:
        relay = subprocess.Popen(
            [*argv, str(log), str(times) if times is not None else os.devnull],
            stdin=read,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a signal to the launcher's group is not the relay's
            bufsize=0,
            pass_fds=(log,) if log >= 0 else (),
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
