"""A trial's own cgroup (Linux, cgroup v2), where this process may make one: everything the script starts stays in it.

A process cannot leave its cgroup (unless it may write to another one's
``cgroup.procs``), and every child it forks is born in it. So killing what a
cgroup holds, until the kernel says it is empty (``cgroup.events``:
``populated 0``), leaves nothing of the trial behind, however fast its
processes fork, whatever environment or session they take. ``cgroup.kill``
(Linux 5.14) kills them all at once; before it, each process listed is killed
until none is left.

The trial's cgroup is a child of the cgroup this process runs in, named after
the trial's token; the script is moved into it as it starts (and whatever it
forked in its first moments, `TrialCgroup.add`). That works where the cgroup
is delegated to this user (a systemd user service or scope with
``Delegate=yes``, a container given its own cgroup namespace) or this process
is root; anywhere else (cgroup v1, a session scope owned by root, no ``/proc``)
`TrialCgroup.create` returns None and `zeus_run.trial.proctree` makes do with
its subreaper and sweeps. ``ZEUS_RUN_CGROUP=off`` never makes one.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
from pathlib import Path

logger = logging.getLogger(__name__)

#: Set to ``off`` (or ``0``, ``no``, ``false``) to never put a trial in a cgroup of its own.
ENV_SWITCH = "ZEUS_RUN_CGROUP"
_PREFIX = "zeus-run-"


def own_cgroup_dir() -> Path | None:
    """The directory of the cgroup v2 this process runs in (None: no cgroup v2 mounted, or not found)."""
    try:
        with open("/proc/self/cgroup", "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
        with open("/proc/self/mountinfo", "rb") as f:
            mounts = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    path = next((line[3:] for line in lines if line.startswith("0::")), None)
    if path is None or not path.startswith("/"):
        return None
    for mount in mounts:
        fields = mount.split(" ")
        if " - " not in mount or len(fields) < 5:
            continue
        fstype = mount.split(" - ", 1)[1].split(" ", 1)[0]
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if fstype != "cgroup2":
            continue
        if root == "/":
            rel = path
        elif path == root or path.startswith(root + "/"):
            rel = path[len(root) :]
        else:
            continue
        return Path(point + rel.rstrip("/")) if rel != "/" else Path(point)
    return None


def _unescape(text: str) -> str:
    """A mountinfo field (spaces and the like are written as octal escapes)."""
    return text.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def enabled() -> bool:
    """Whether trials may get a cgroup of their own here (`ENV_SWITCH` is not off)."""
    return os.environ.get(ENV_SWITCH, "").strip().lower() not in ("off", "0", "no", "false")


class TrialCgroup:
    """One trial's cgroup.

    Args:
        path: Its directory.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def name_of(cls, token: str) -> str:
        """The directory name of the cgroup of the trial with this token."""
        return _PREFIX + token

    @classmethod
    def create(cls, token: str) -> TrialCgroup | None:
        """A new, empty cgroup for the trial with ``token`` beside this process's own; None where none can be made."""
        if not token or not enabled():
            return None
        parent = own_cgroup_dir()
        if parent is None or not os.access(parent / "cgroup.procs", os.W_OK):
            return None
        path = parent / cls.name_of(token)
        try:
            os.mkdir(path)
        except OSError as exc:
            logger.debug("no cgroup for the trial (%s): %s", path, exc.strerror)
            return None
        return cls(path)

    @classmethod
    def enter(cls, token: str, pid: int) -> TrialCgroup | None:
        """A new cgroup for the trial with ``token``, with process ``pid`` (the script) and its descendants moved
        in (`create`, `add`); None where none can be made."""
        cgroup = cls.create(token)
        return cgroup if cgroup is not None and cgroup.add(pid) else None

    @classmethod
    def existing(cls, token: str) -> TrialCgroup | None:
        """The cgroup a launcher made for the trial with ``token`` beside this process's own, if it is still there."""
        parent = own_cgroup_dir() if token and enabled() else None
        if parent is None or not (parent / cls.name_of(token)).is_dir():
            return None
        return cls(parent / cls.name_of(token))

    def add(self, pid: int) -> bool:
        """Move process ``pid`` and its descendants into the cgroup (what they fork from then on is born there).

        The script is moved as it starts, so a shell may have forked its command already: the processes
        it started are moved after it, each before its own children are looked for.

        Returns:
            False (and the cgroup removed) if ``pid`` cannot be moved: the trial goes on without one.
        """
        procs = self.path / "cgroup.procs"
        try:
            _write(procs, str(pid))
        except OSError as exc:
            logger.debug("cannot move pid %d into %s: %s; no cgroup for the trial", pid, self.path, exc.strerror)
            self.remove(0.0)
            return False
        todo, seen = [pid], {pid}
        while todo:
            for child in _children(todo.pop()):
                if child not in seen:
                    seen.add(child)
                    try:
                        _write(procs, str(child))
                    except OSError:
                        continue  # gone already
                    todo.append(child)
        return True

    def pids(self) -> list[int]:
        """The processes in it now."""
        try:
            with open(self.path / "cgroup.procs", "rb") as f:
                return [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            return []

    def populated(self) -> bool:
        """Whether any process is in it (``cgroup.events``; without it, whether ``cgroup.procs`` lists one)."""
        try:
            with open(self.path / "cgroup.events", "rb") as f:
                for line in f.read().splitlines():
                    if line.startswith(b"populated "):
                        return line.split()[1] != b"0"
        except OSError:
            pass
        return bool(self.pids())

    def kill(self) -> list[int]:
        """SIGKILL every process in it (at once where the kernel has ``cgroup.kill``); the pids listed before."""
        pids = self.pids()
        try:
            _write(self.path / "cgroup.kill", "1")
            return pids
        except OSError:
            pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return pids

    def remove(self, timeout: float) -> bool:
        """Kill what is left in it until it is empty (for at most ``timeout`` s), then remove it.

        Returns:
            Whether it was emptied and removed.
        """
        end = time.monotonic() + timeout
        while self.populated():
            if time.monotonic() > end:
                logger.warning("processes %s of the trial's cgroup %s survived SIGKILL", self.pids(), self.path)
                return False
            self.kill()
            time.sleep(0.005)
        for _ in range(100):
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > end:
                    logger.debug("cannot remove the trial's cgroup %s: %s", self.path, exc.strerror)
                    return False
            time.sleep(0.005)
        return False


def _children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (none if it is gone)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            continue
    return out


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
