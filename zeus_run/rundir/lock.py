"""Locking a run directory, waiting for brief holders, and naming the holder (`zeus_run.rundir.store.RunDir.open`).

The holder locks the directory itself (``flock`` on its fd; a lock file where
directories cannot be locked) and writes ``.lock``: pid, host, since (UTC) and
its role: ``run`` for a launcher, which holds it for the whole run, or a brief
role (``ask``, ``tell``, ``expire``) for ask/tell, which holds it for a moment
and is waited for.

A caller that must not block (the server's event loop) takes locks inside
`first_lock_without_waiting`: the first lock it takes while another process
holds it raises `WouldWait` at once, before the call has done anything, so the
caller can make the same call again where waiting is fine (a worker thread).
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from zeus_run import _fs
from zeus_run.errors import BUSY_EXIT_CODE, RunDirBusy, RunDirError

logger = logging.getLogger(__name__)

LOCK_NAME = ".lock"

_LINK_ADVICE = (
    "zeus-run does not follow symbolic links in a run directory: whoever planted one could make it overwrite "
    "the link's target. Remove it, or choose another run directory."
)


class WouldWait(RunDirBusy):
    """The run directory is held by another (inside `first_lock_without_waiting`); nothing was done."""


#: Inside `first_lock_without_waiting`: [whether a lock was taken yet]; None outside.
_NO_WAIT: ContextVar[list[bool] | None] = ContextVar("zeus_run_no_wait", default=None)


@contextmanager
def first_lock_without_waiting() -> Iterator[None]:
    """Within this block (this thread or task), the first run-directory lock taken does not wait: held by
    another, it raises `WouldWait` before anything was done under it. Later locks wait as usual (the call
    has done something by then, so it cannot be made again elsewhere)."""
    token = _NO_WAIT.set([False])
    try:
        yield
    finally:
        _NO_WAIT.reset(token)


def _lock(path: Path) -> int:
    """Lock the directory itself; fall back to a lock file where directories cannot be locked."""
    try:
        return _fs.lock_dir(path)
    except BlockingIOError:
        raise _in_use(path) from None
    except OSError as exc:
        if exc.errno not in (errno.EBADF, errno.ENOLCK, errno.EINVAL, errno.EOPNOTSUPP):
            raise _unusable(path, exc) from None
    # NOTE: some network file systems emulate flock with byte-range locks, which
    # need a file open for writing. The lock file is re-checked after locking:
    # if it was replaced in between, the lock is taken again on the new one.
    logger.debug("cannot lock the directory %s itself; locking %s", path, LOCK_NAME)
    lock_path = path / LOCK_NAME
    for _ in range(10):
        try:
            fd = _fs.open_fd(lock_path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise _unusable(lock_path, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise _in_use(path) from None
        try:
            same = os.path.samestat(os.fstat(fd), os.lstat(lock_path))
        except OSError:
            same = False
        if same:
            return fd
        os.close(fd)
    raise RunDirError(
        f"Cannot lock {str(lock_path)!r}: it keeps being replaced. Is another program using the run directory?"
    )


#: Roles of holders that keep the lock only for a moment (`RunDir.open`'s ``wait`` waits for them).
BRIEF_ROLES = ("ask", "tell", "expire", "register")
#: Seconds a waiter retries even when ``.lock`` names a launcher: the holder writes its name
#: just after it takes the lock, so for a moment ``.lock`` still names the one before.
_NAME_LAG = 1.0


#: Seconds a waiter retries while ``.lock`` names a holder that is dead on this host. NOTE: a killed
#: launcher's lock lives on in any process that still shares its open directory: a child it had
#: just forked holds it until the child closes its descriptors before exec, which on a loaded host
#: can be a while after the launcher itself was reaped (``kill -9``, then resume at once).
DEAD_HOLDER_WAIT = 10.0


def _lock_waiting(path: Path, wait: float) -> int:
    """`_lock`, retried for up to ``wait`` seconds while the holder is a brief one (backing off to 0.2 s),
    and for up to `DEAD_HOLDER_WAIT` seconds while the named holder is dead (what it left is letting go)."""
    started = time.monotonic()
    deadline = started + wait
    pause = 0.01
    no_wait = _NO_WAIT.get()
    while True:
        try:
            fd = _lock(path)
            if no_wait is not None:
                no_wait[0] = True
            return fd
        except RunDirBusy as exc:
            if no_wait is not None and not no_wait[0]:
                raise WouldWait(str(exc)) from None
            now = time.monotonic()
            words = _holder_words(path)
            brief = words[3:4] != [] and words[3] in BRIEF_ROLES
            dead = _holder_dead(words)
            until = max(deadline, started + DEAD_HOLDER_WAIT) if dead else deadline
            if now >= until or not (brief or dead or now - started < _NAME_LAG):
                raise
        time.sleep(min(pause, max(until - time.monotonic(), 0.0)))
        pause = min(pause * 2, 0.2)


def _holder_dead(words: list[str]) -> bool:
    """Whether ``.lock``'s words name a process of this host that no longer exists."""
    if len(words) < 2 or words[1] != (socket.gethostname() or "?") or not words[0].isdigit():
        return False
    pid = int(words[0])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


def is_held(path: Path) -> bool:
    """Whether someone holds the run directory's lock now (taken and dropped at once to see)."""
    try:
        fd = _lock(path)
    except RunDirBusy:
        return True
    os.close(fd)
    return False


def launcher_holds(path: Path) -> bool:
    """Whether ``.lock`` names a launcher (``zeus-run run``) as the holder, not a brief ask or tell."""
    words = _holder_words(path)
    return bool(words) and words[3:4] in ([], ["run"])


def holder_role(path: Path) -> str | None:
    """The role of the holder ``.lock`` names (``run`` for a launcher, or a brief role); None when it names
    no one, or a process of this host that is gone: the holder has not written its name yet (it does so just
    after it takes the lock) or the name is the last holder's."""
    words = _holder_words(path)
    if not words or _holder_dead(words):
        return None
    return words[3] if len(words) > 3 else "run"


def _holder_words(path: Path) -> list[str]:
    """``.lock``'s words: pid, host, since, and the role (absent: a launcher)."""
    try:
        with _fs.open_read(path / LOCK_NAME) as f:
            return f.read(200).decode("ascii", "replace").split()
    except OSError:
        return []


def _in_use(path: Path) -> RunDirBusy:
    holder = "pid unknown"
    words = _holder_words(path)
    if words:
        pid, host, since = [*words, "?", "?"][:3]
        holder = f"pid {pid} on {host}, since {since}"
        if words[3:4] and words[3] != "run":
            holder += f", a zeus-run {words[3]}"
    return RunDirBusy(
        f"Run directory {str(path)!r} is busy: in use by another zeus-run launcher ({holder}). "
        f"Nothing was run (exit code {BUSY_EXIT_CODE}); wait for it to finish, stop it, or use a different --run-dir."
    )


#: The width ``.lock``'s line is padded to (unit: bytes): a server's every ask and tell writes it, and writing
#: over a line of the same width costs no truncation (a journaled change of the file's size).
_HOLDER_WIDTH = 128


def _write_holder(path: Path, role: str = "run") -> int:
    """Write this holder's pid, host, time and role into ``.lock`` (for the message another launcher shows)."""
    lock_path = path / LOCK_NAME
    try:
        fd = _fs.open_fd(lock_path, os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        raise _unusable(lock_path, exc) from None
    try:
        since = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        line = f"{os.getpid()} {socket.gethostname() or '?'} {since} {role}".encode()
        if len(line) < _HOLDER_WIDTH:  # padded to one width: written over the last holder's, never truncated
            line = line.ljust(_HOLDER_WIDTH - 1)
        line += b"\n"
        if os.fstat(fd).st_size != len(line):
            os.ftruncate(fd, 0)
        _fs.write_all(fd, line)
    except OSError as exc:
        os.close(fd)
        raise _unusable(lock_path, exc) from None
    return fd


def _unusable(path: Path, exc: OSError) -> RunDirError:
    if isinstance(exc, _fs.UnsafePathError):
        return RunDirError(f"{exc.strerror}. {_LINK_ADVICE}")
    return RunDirError(
        f"Cannot use {str(path)!r}: {exc.strerror or exc}. Fix its permissions or free space, or choose another "
        "run directory with --run-dir."
    )
