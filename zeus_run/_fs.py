"""Safe file primitives for directories that others (users, training scripts) may write into.

Run directories often sit in shared places (``/tmp``, a cluster's scratch), and
a training script can write into its own trial directory. So every file
zeus-run writes there is opened

* without following a symbolic link at the last component (``O_NOFOLLOW``): a
  link planted as ``history.jsonl`` cannot make zeus-run write, append to or
  truncate a file elsewhere;
* only if it is a regular file (``O_NONBLOCK`` at open, so a FIFO in its
  place cannot block the launcher);
* for temporaries: created with ``O_EXCL`` next to the target, written,
  fsynced and renamed over it, so readers see the old or the new content.

Errors are `OSError`; a link or a file of the wrong type is `UnsafePathError`,
whose message says what was found and why it is refused.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path
from typing import BinaryIO

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY


class UnsafePathError(OSError):
    """A path zeus-run writes is a symbolic link or not a regular file (or directory).

    Its ``strerror`` is a sentence that starts with the path.
    """


def describe_link(path: str | os.PathLike[str]) -> str:
    """``path -> target`` for a symbolic link (the target as stored), else the path."""
    try:
        return f"{os.fspath(path)} -> {os.readlink(path)}"
    except OSError:
        return os.fspath(path)


def open_fd(path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int:
    """Open a regular file without following a symbolic link; returns a blocking fd.

    Args:
        path: The file.
        flags: ``os.O_*`` flags (``O_NOFOLLOW``, ``O_CLOEXEC`` and ``O_NOCTTY`` are added).
        mode: Permissions if the file is created.

    Raises:
        UnsafePathError: ``path`` is a symbolic link or not a regular file.
        OSError: Any other failure (missing, permissions, disk full).
    """
    try:
        fd = os.open(path, flags | _NOFOLLOW | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):
            raise UnsafePathError(
                errno.ELOOP,
                f"{describe_link(path)} is a symbolic link; zeus-run does not follow links where it writes",
                os.fspath(path),
            ) from None
        if exc.errno == errno.ENXIO:  # a FIFO without a reader, opened for writing
            raise UnsafePathError(
                errno.ENXIO, f"{os.fspath(path)} is a FIFO, not a regular file", os.fspath(path)
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(errno.EINVAL, f"{os.fspath(path)} is not a regular file", os.fspath(path))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_append(path: str | os.PathLike[str]) -> BinaryIO:
    """Open (creating) a regular file for appending, as a binary file object. See `open_fd`."""
    return os.fdopen(open_fd(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab")


def open_update(path: str | os.PathLike[str]) -> BinaryIO:
    """Open an existing regular file for reading and writing (``r+b``). See `open_fd`."""
    return os.fdopen(open_fd(path, os.O_RDWR), "r+b")


def open_read(path: str | os.PathLike[str]) -> BinaryIO:
    """Open an existing regular file for reading. See `open_fd`."""
    return os.fdopen(open_fd(path, os.O_RDONLY), "rb")


def read_at_most(f: BinaryIO, limit: int) -> bytes:
    """What ``f.read(limit)`` returns (up to ``limit`` bytes), without a buffer of ``limit`` bytes for a small file
    (a few MB allocated and cut back cost more than the read: a server reads small bounded files per request)."""
    want = min(limit, os.fstat(f.fileno()).st_size + 4096)
    data = f.read(want)
    if len(data) == want and want < limit:  # it grew meanwhile
        data += f.read(limit - want)
    return data


def touch(path: str | os.PathLike[str]) -> bool:
    """Create ``path`` if missing (a signal file), never through a link.

    Returns:
        Whether the file exists now. Best effort: any failure returns False.
    """
    try:
        os.close(open_fd(path, os.O_WRONLY | os.O_CREAT))
    except OSError:
        return False
    return True


def write_all(fd: int, data: bytes) -> None:
    """Write every byte (``os.write`` may write fewer); raises `OSError` (e.g. ENOSPC, EFBIG)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, f"write returned {n}")
        view = view[n:]


def atomic_write(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Replace a file's content atomically: ``NAME.tmp`` (O_EXCL, no links), fsync, rename.

    A stale ``NAME.tmp`` (from a crash, or a link someone planted) is removed
    first; ``unlink`` removes a link itself, never its target. On failure the
    temporary is removed and the old file is left as it was.

    Raises:
        OSError: The temporary could not be created or written (disk full, permissions).
    """
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
    try:
        try:
            write_all(fd, raw)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(target.parent)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or create in ``path`` durable (best effort)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


#: Modes zeus-run creates its directories and files with (the umask may only take more away): never writable by
#: others, whatever the umask (``umask 000`` included).
DIR_MODE, FILE_MODE = 0o755, 0o644


def make_dirs(path: str | os.PathLike[str], mode: int = DIR_MODE) -> None:
    """``mkdir -p`` with an explicit mode for every directory it creates (``Path.mkdir(parents=True)`` creates the
    parents with 0777 less the umask: under ``umask 000``, writable by every user). Existing ones are left as they
    are.

    Raises:
        OSError: One cannot be created, or a part of ``path`` is not a directory.
    """
    p = Path(os.path.abspath(path))
    missing: list[Path] = []
    while not os.path.isdir(p):
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
        except FileExistsError:
            if not os.path.isdir(d):
                why = "it exists but is not a directory (a file, or a symbolic link that leads to none: a loop?)"
                raise NotADirectoryError(errno.ENOTDIR, why, os.fspath(d)) from None


def make_dir(path: str | os.PathLike[str]) -> None:
    """Create a directory (its parent must exist) or check an existing one is a real directory.

    Raises:
        UnsafePathError: ``path`` is a symbolic link or not a directory.
        OSError: It cannot be created.
    """
    try:
        os.mkdir(path, DIR_MODE)
        return
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(
            errno.ELOOP,
            f"{describe_link(path)} is a symbolic link; zeus-run does not follow links where it writes",
            os.fspath(path),
        )
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(errno.ENOTDIR, f"{os.fspath(path)} is not a directory", os.fspath(path))


def unsafe_entry(path: str | os.PathLike[str], want_dir: bool = False) -> str | None:
    """Why ``path`` cannot be written safely (a link, or the wrong type), or None if it is fine or absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{os.fspath(path)} cannot be inspected ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return f"{describe_link(path)} is a symbolic link"
    ok = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    if not ok:
        return f"{os.fspath(path)} is not a {'directory' if want_dir else 'regular file'}"
    return None


def lock_dir(path: str | os.PathLike[str]) -> int:
    """Take an exclusive, non-blocking ``flock`` on the directory itself.

    NOTE: a lock on a directory cannot be removed from under its holder (a
    lock file can be unlinked, and a second launcher would then lock a new
    file). The lock goes with the open file description, so it is released
    when the returned fd is closed or the process dies.

    Returns:
        The directory's fd, which holds the lock.

    Raises:
        BlockingIOError: Another process holds the lock.
        OSError: The directory cannot be opened or locked (some network file
            systems cannot lock directories).
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd
