"""The processes of one trial: found by an environment marker, measured, and swept away.

A trial's script runs in a session (and process group) of its own, but the
processes it starts may leave both: a daemon (setsid, double fork), a child
that moves to a new process group. They all inherit the trial's environment,
so every process whose environment carries ``ZEUS_TRIAL_TOKEN=<token>``
belongs to the trial. So does every process in the script's session or
process group, and every descendant of a member (a child started with a clean
environment). `ProcessTree` finds them through ``/proc``, sums their CPU time,
signals them, and kills them all when the trial ends.

A process that clears its environment *and* leaves the session *and* is
orphaned (reparented to init) cannot be told apart from any other process; it
escapes. Without ``/proc`` (not Linux) only the process group is signalled.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import time
from dataclasses import dataclass

from zeus_run.contract import Env

logger = logging.getLogger(__name__)

#: Environment variable that marks every process of a trial.
MARKER = Env.TRIAL_TOKEN

_PROC = "/proc"
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def new_token() -> str:
    """A fresh, unguessable trial token."""
    return secrets.token_hex(12)


def have_proc() -> bool:
    """Whether processes can be found through ``/proc`` here."""
    return os.path.isfile(f"{_PROC}/self/stat")


@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    pgid: int
    sid: int
    zombie: bool
    cpu: float  # own user + system time (unit: s)
    cpu_children: float  # of its reaped children (unit: s)
    start: int  # start time (clock ticks since boot): tells a reused pid apart


def _read_stat(pid: int) -> _Proc | None:
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    try:
        rest = raw[raw.rindex(b")") + 2 :].split()
        utime, stime, cutime, cstime = (int(x) for x in rest[11:15])
        return _Proc(
            pid=pid,
            ppid=int(rest[1]),
            pgid=int(rest[2]),
            sid=int(rest[3]),
            zombie=rest[0] in (b"Z", b"X"),
            cpu=(utime + stime) / _TICKS,
            cpu_children=(cutime + cstime) / _TICKS,
            start=int(rest[19]),
        )
    except (ValueError, IndexError):
        return None


def _children(pid: int) -> list[int]:
    """Pids of the children of ``pid``'s main thread (``/proc/PID/task/PID/children``; none where it is missing)."""
    try:
        with open(f"{_PROC}/{pid}/task/{pid}/children", "rb") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


def _environ_has(pid: int, needle: bytes) -> bool:
    try:
        with open(f"{_PROC}/{pid}/environ", "rb") as f:
            return needle in f.read()
    except OSError:
        return False


def find_marked(token: str) -> list[int]:
    """Pids of live processes whose environment carries ``token`` (and their descendants)."""
    return sorted(ProcessTree(token).members())


class ProcessTree:
    """Every process of one trial.

    Args:
        token: The trial's marker value (empty: no marker, only the session and group of ``root``).
        root: Pid of the script, which leads its own session and process group
            (None until `attach`).
        variable: The environment variable holding the token (`MARKER`).
    """

    #: Least time between two full /proc scans for `cpu_seconds` (unit: s); in between,
    #: only the members already known are read (new processes are found at the next scan).
    FULL_SCAN_INTERVAL = 1.0

    def __init__(self, token: str, root: int | None = None, variable: str = MARKER) -> None:
        self._needle = f"{variable}={token}".encode() + b"\0" if token else b""
        self.root = root
        self._marked: dict[tuple[int, int], bool] = {}  # (pid, start) -> environ carries the marker
        self._last: dict[int, _Proc] = {}
        self._retired = 0.0
        self._cpu = 0.0
        self._scan_at = -1e9

    def attach(self, root: int) -> None:
        """Set the script's pid (it leads its own session and process group).

        The first full scan for `cpu_seconds` comes `FULL_SCAN_INTERVAL` later:
        a process just started has no children yet.
        """
        self.root = root
        self._scan_at = time.monotonic()

    # -- finding ---------------------------------------------------------------------
    def members(self) -> dict[int, _Proc]:
        """Live (non-zombie) processes of the trial, by pid."""
        return {pid: p for pid, p in self._scan().items() if not p.zombie}

    def _scan(self) -> dict[int, _Proc]:
        """Every process of the trial, zombies included (one pass over /proc)."""
        try:
            names = os.listdir(_PROC)
        except OSError:
            return {}
        me = os.getpid()
        procs: dict[int, _Proc] = {}
        for name in names:
            if not name.isdigit() or int(name) == me:
                continue
            p = _read_stat(int(name))
            if p is not None:
                procs[p.pid] = p
        members: dict[int, _Proc] = {}
        for pid, p in procs.items():
            key = (pid, p.start)
            marked = self._marked.get(key)
            if marked is None:
                marked = self._marked[key] = bool(self._needle) and _environ_has(pid, self._needle)
            if marked or (self.root is not None and self.root in (p.sid, p.pgid, pid)):
                members[pid] = p
        # Descendants of members (e.g. a child started with a clean environment).
        grew = True
        while grew:
            grew = False
            for pid, p in procs.items():
                if pid not in members and p.ppid in members:
                    members[pid] = p
                    grew = True
        if len(self._marked) > 4 * len(procs) + 64:  # forget pids long gone
            self._marked = {k: v for k, v in self._marked.items() if k[0] in procs}
        return members

    # -- measuring ---------------------------------------------------------------------
    def cpu_seconds(self) -> float:
        """CPU time (user + system) the trial's processes have used so far (unit: s; never decreases).

        Counts live members, the reaped children they waited for, and members
        that ended since the last reading (at their last reading). Reads the
        known members' ``stat`` and their children's on every call, and rescans
        /proc for new members every `FULL_SCAN_INTERVAL` seconds.
        """
        if self.root is None and not self._last:
            return self._cpu  # nothing started yet
        now = time.monotonic()
        if now - self._scan_at >= self.FULL_SCAN_INTERVAL:
            self._scan_at = now
            current = self._scan()
        else:  # the members known, and their children (a wrapper shell's script, before the scan finds it)
            current = {}
            todo = [*self._last, *([self.root] if self.root is not None else [])]
            seen = set(todo)
            while todo:
                pid = todo.pop()
                p = _read_stat(pid)
                old = self._last.get(pid)
                if p is not None and (old is None or p.start == old.start):
                    current[pid] = p
                    fresh = [c for c in _children(pid) if c not in seen]
                    seen.update(fresh)
                    todo += fresh
        for pid, p in self._last.items():
            if pid not in current and p.ppid not in current:
                # Gone, and not into a member's reaped-children time: keep its last reading.
                self._retired += p.cpu + p.cpu_children
        self._last = current
        total = self._retired + sum(p.cpu + p.cpu_children for p in current.values())
        self._cpu = max(self._cpu, total)
        return self._cpu

    # -- signalling --------------------------------------------------------------------
    def signal(self, sig: int) -> int:
        """Send ``sig`` to the script's process group and, once, to every member outside it.

        Returns:
            How many processes outside the group were signalled.
        """
        if self.root is not None:
            _killpg(self.root, sig)
        n = 0
        for pid, p in self.members().items():
            if p.pgid == self.root:
                continue  # killpg reached it; a second signal could land in its exit path
            try:
                os.kill(pid, sig)
                n += 1
            except (ProcessLookupError, PermissionError):
                pass
        return n

    def sweep(self, timeout: float = 5.0) -> list[int]:
        """SIGKILL every process of the trial until none is left (or ``timeout`` passes).

        Returns:
            The pids that were killed (empty when nothing was left).
        """
        killed: list[int] = []
        end = time.monotonic() + timeout
        while True:
            if self.root is not None:
                _killpg(self.root, signal.SIGKILL)
            live = self.members()
            if not live:
                return killed
            for pid in live:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except (ProcessLookupError, PermissionError):
                    pass
            if time.monotonic() > end:
                logger.warning("processes %s of the trial survived SIGKILL", sorted(live))
                return killed
            time.sleep(0.01)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
