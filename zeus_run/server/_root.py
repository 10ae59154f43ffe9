"""The server's root directory: one run directory per job, job names that stay inside it, one server per root.

``zeus-run serve --root DIR`` keeps job ``NAME`` in ``DIR/NAME``, a run
directory exactly as ``zeus-run run`` writes it. A job name is one path
component of letters, digits, ``.``, ``_`` and ``-`` that does not start with
a dot (so no ``..``, no ``/``, no hidden files); an existing entry of that name
must be a real directory, not a link. The server holds an ``flock`` on
``DIR/.serve.lock`` for its life: a second server on the same root is refused
with the holder's pid, host and start time.
"""

from __future__ import annotations

import datetime
import fcntl
import os
import re
import socket
import stat
from pathlib import Path

from zeus_run import _fs
from zeus_run.errors import RunDirBusy, UsageError

LOCK_NAME = ".serve.lock"
#: Where a deleted job's run directory goes (hidden: not a job).
DELETED_NAME = ".deleted"
#: The operator's token the server makes when started without ``--token-file`` (loopback only), kept across
#: restarts.
LOCAL_TOKEN_NAME = ".serve.token"
MAX_JOB_NAME = 100
_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
JOB_NAME_RULE = (
    f"use 1-{MAX_JOB_NAME} letters, digits, '.', '_' or '-', starting with a letter or digit (no '/', no '..'); "
    "the job's run directory is ROOT/NAME."
)


class JobNameError(UsageError):
    """A job name that is not one safe path component under the root."""


def check_job_name(name: str) -> str:
    """Return ``name`` if it is a safe job name.

    Raises:
        JobNameError: It is empty, too long, has characters other than
            ``[A-Za-z0-9._-]``, or starts with a dot (``..``, hidden files).
    """
    if not name or len(name) > MAX_JOB_NAME or not _JOB_NAME.fullmatch(name):
        shown = name[:MAX_JOB_NAME] + ("..." if len(name) > MAX_JOB_NAME else "")
        raise JobNameError(f"Job name {shown!r} is not allowed: {JOB_NAME_RULE}")
    return name


def _refuse_world_writable(path: Path) -> None:
    """Refuse a root every user may write: anyone could replace its tokens file or plant files in its jobs.

    Raises:
        UsageError: It is writable by others (made so by hand, or by zeus-run before it set modes itself).
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise UsageError(f"Cannot read the server root {str(path)!r}: {exc.strerror or exc}.") from None
    if mode & stat.S_IWOTH:
        raise UsageError(
            f"The server root {str(path)!r} is writable by every user (mode {stat.filemode(mode)}): anyone could "
            "replace its tokens file or plant files in its jobs. Run `chmod o-w` on it (and on any job directory "
            "in it that is writable by others), then start the server again."
        )


class ServerRoot:
    """The locked root directory of one server.

    Args:
        path: The root; created if missing.

    Raises:
        RunDirBusy: Another server holds this root.
        UsageError: The root cannot be created or locked.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).absolute()
        try:
            _fs.make_dirs(self.path)  # 0755 whatever the umask
        except OSError as exc:
            raise UsageError(f"Cannot create the server root {str(self.path)!r}: {exc.strerror or exc}.") from None
        _refuse_world_writable(self.path)
        self._fd = _lock(self.path / LOCK_NAME)

    def job_dir(self, name: str) -> Path:
        """The run directory of job ``name`` (it need not exist yet).

        Raises:
            JobNameError: The name is unsafe, or its entry in the root is a link or not a directory.
        """
        path = self.path / check_job_name(name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return path
        if not stat.S_ISDIR(st.st_mode):
            raise JobNameError(
                f"Job name {name!r} is not allowed: {str(path)!r} is a link or not a directory, and the server "
                "follows no links. Remove it or choose another name."
            )
        return path

    def jobs(self) -> list[str]:
        """Names of the jobs (run directories) under the root."""
        out = []
        for entry in sorted(os.scandir(self.path), key=lambda e: e.name):
            if _JOB_NAME.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                out.append(entry.name)
        return out

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _lock(path: Path) -> int:
    try:
        fd = _fs.open_fd(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise UsageError(f"Cannot open {str(path)!r}: {exc.strerror or exc}. Is the root writable?") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 300, 0).decode("ascii", "replace").strip() or "pid unknown"
        os.close(fd)
        raise RunDirBusy(
            f"Server root {str(path.parent)!r} is in use by another zeus-run server ({holder}). "
            "Two servers must not write the same jobs: stop it, or give this one another --root."
        ) from None
    since = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    os.ftruncate(fd, 0)
    _fs.write_all(fd, f"pid {os.getpid()} on {socket.gethostname() or '?'}, since {since}\n".encode())
    return fd
