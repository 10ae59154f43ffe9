"""The processes of one trial: found by an environment marker, measured, and swept away.

A trial's script runs in a session (and process group) of its own, but the
processes it starts may leave both: a daemon (setsid, double fork), a child
that moves to a new process group. They all inherit the trial's environment,
so every process whose environment carries ``ZEUS_TRIAL_TOKEN=<token>``
belongs to the trial. So does every process in the script's session or
process group, or in a session a member made, and every descendant of a
member (a child started with a clean environment). `ProcessTree` finds them
through ``/proc``, sums their CPU time, signals them, and kills them all when
the trial ends, until none is left:

* Where this process may make a cgroup (`zeus_run.trial._cgroup`: cgroup v2,
  delegated or root), the script runs in one of its own, and the kernel kills
  everything in it, however fast it forks, whatever environment or session
  it takes.
* Everywhere on Linux, the process that runs trials is their *subreaper*
  (``PR_SET_CHILD_SUBREAPER``, `subreaper`): a process whose parent
  exits is handed to it, not to init, and stays visible (a zombie) until it
  reaps it. So a daemon that forks and exits over and over cannot slip
  between two looks at ``/proc``: the sweep kills what it finds, reaps the
  trial's orphans, and stops only after two looks in a row found nothing
  (`ProcessTree.sweep`). The orphans of a running trial are reaped as it goes
  (`ProcessTree.tend`); only orphans are, never a child this process started
  (those are session leaders or in its own session), so no exit code of a
  script or a command is taken from its waiter.

A process that clears its environment *and* leaves the session *and* is
orphaned where no cgroup could be made cannot be told apart from any other
process; it escapes. Without ``/proc`` (not Linux) only the process group is
signalled.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from zeus_run.contract import Env
from zeus_run.trial._cgroup import TrialCgroup

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


def _our_children() -> dict[int, _Proc]:
    """This process's children (of every thread: an orphan is handed to one of them), zombies included."""
    me = os.getpid()
    try:
        tids = os.listdir(f"{_PROC}/{me}/task")
    except OSError:
        return {}
    out: dict[int, _Proc] = {}
    for tid in tids:
        try:
            with open(f"{_PROC}/{me}/task/{tid}/children", "rb") as f:
                pids = [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            continue
        for pid in pids:
            p = _read_stat(pid)
            if p is not None and p.ppid == me:
                out[pid] = p
    return out


def _reap(children: dict[int, _Proc]) -> list[_Proc]:
    """Reap the orphans among ``children`` that have exited; the ones reaped.

    Only an orphan handed to this process (a subreaper) is reaped: a process in a session other
    than this one's that does not lead its session. A child this process started (`subprocess`)
    is in its session or leads its own (``start_new_session``; a ``setsid`` after), so its
    waiter always gets its exit code.
    """
    own_sid = os.getsid(0)
    reaped = []
    for pid, p in children.items():
        if not p.zombie or p.sid in (own_sid, pid):
            continue
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                reaped.append(p)
        except ChildProcessError:
            pass
    return reaped


#: ``prctl`` options (linux/prctl.h).
_PR_SET_CHILD_SUBREAPER = 36
#: Trials running in this process as its subreaper's reason (`subreaper`), and the lock over the count.
_REAPING = [0]
_REAPING_LOCK = threading.Lock()


def _set_subreaper(on: bool) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


@contextlib.contextmanager
def subreaper() -> Iterator[bool]:
    """While a trial runs, make this process the reaper of its descendants' orphans (Linux
    ``PR_SET_CHILD_SUBREAPER``): a process whose parent exits is handed to it, not to init.

    Process-wide, so counted: the first trial in makes it one, the last one out ends it (an
    orphan handed over meanwhile stays this process's; `ProcessTree.tend` and `ProcessTree.sweep`
    reap the ones that exit).

    Yields:
        Whether this process is a subreaper (False where the call is missing: not Linux).
    """
    with _REAPING_LOCK:
        _REAPING[0] += 1
        on = _set_subreaper(True)
    try:
        yield on
    finally:
        with _REAPING_LOCK:
            _REAPING[0] -= 1
            if _REAPING[0] == 0:
                _set_subreaper(False)


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
    #: Least time between two readings in `cpu_seconds` (unit: s): one clock tick, the resolution of the
    #: kernel's CPU times; a call within it returns the last reading.
    READING_INTERVAL = 1.0 / _TICKS
    #: Least time between two readings of the known members' children in `cpu_seconds` (unit: s): the
    #: launcher's tick, so an epoch costs one read per process, and a burst of epochs no more.
    CHILDREN_INTERVAL = 0.05
    #: Least time between two looks for the trial's orphans to reap while it runs (unit: s; `tend`).
    TEND_INTERVAL = 0.5

    def __init__(self, token: str, root: int | None = None, variable: str = MARKER) -> None:
        self._needle = f"{variable}={token}".encode() + b"\0" if token else b""
        self.root = root
        self._marked: dict[tuple[int, int], bool] = {}  # (pid, start) -> environ carries the marker
        self._last: dict[int, _Proc] = {}
        self._retired = 0.0
        self._cpu = 0.0
        self._scan_at = -1e9
        self._tend_at = -1e9
        self._children_at = -1e9
        self._read_at = -1e9
        #: The sessions of the trial's marked processes (the script's, and each one a member made with
        #: setsid): only to know an orphan seen as a zombie when the sweep reaps it, never to kill.
        self._sessions: set[int] = set() if root is None else {root}
        #: The trial's cgroup (None: none could be made; `attach`). A launcher's leftover one is found by its token.
        self.cgroup: TrialCgroup | None = TrialCgroup.existing(token) if token and variable == MARKER else None

    def attach(self, root: int, cgroup: TrialCgroup | None = None) -> None:
        """Set the script's pid (it leads its own session and process group), and the cgroup it was put in.

        The first full scan for `cpu_seconds` comes `FULL_SCAN_INTERVAL` later:
        a process just started has no children yet.
        """
        self.root = root
        self._sessions.add(root)
        if cgroup is not None:
            self.cgroup = cgroup
        self._scan_at = time.monotonic()

    # -- finding ---------------------------------------------------------------------
    def members(self) -> dict[int, _Proc]:
        """Live (non-zombie) processes of the trial, by pid."""
        return {pid: p for pid, p in self._scan().items() if not p.zombie}

    def _scan(self, kill: list[int] | None = None) -> dict[int, _Proc]:
        """Every process of the trial, zombies included (one pass over /proc).

        Args:
            kill: SIGKILL each live member the moment it is found (one that forks and exits every few
                milliseconds is gone by the end of the pass), and add its pid here.
        """
        try:
            names = os.listdir(_PROC)
        except OSError:
            return {}
        me = os.getpid()
        procs: dict[int, _Proc] = {}
        members: dict[int, _Proc] = {}
        for name in names:
            if not name.isdigit() or int(name) == me:
                continue
            p = _read_stat(int(name))
            if p is None:
                continue
            procs[p.pid] = p
            if self._is_member(p):
                members[p.pid] = p
                if kill is not None:
                    _kill(p, kill)
        # Descendants of members (e.g. a child started with a clean environment).
        grew = True
        while grew:
            grew = False
            for pid, p in procs.items():
                if pid not in members and p.ppid in members:
                    members[pid] = p
                    grew = True
                    if kill is not None:
                        _kill(p, kill)
        if len(self._marked) > 4 * len(procs) + 64:  # forget pids long gone
            self._marked = {k: v for k, v in self._marked.items() if k[0] in procs}
        return members

    def _is_member(self, p: _Proc) -> bool:
        """Whether ``p`` carries the marker (read while it lives), or is in the script's session or process group.

        The session of a live process that carries the marker is noted (`_sessions`): an orphan of
        the trial that exited before it was seen alive is known by it when the sweep reaps it.
        """
        key = (p.pid, p.start)
        marked = self._marked.get(key)
        if marked is None:
            marked = self._marked[key] = bool(self._needle) and not p.zombie and _environ_has(p.pid, self._needle)
        if marked and p.sid > 1:
            self._sessions.add(p.sid)
        return marked or (self.root is not None and self.root in (p.sid, p.pgid, p.pid))

    def tend(self) -> None:
        """Reap the orphans handed to this process (`subreaper`) that have exited, at most every
        `TEND_INTERVAL`: a daemon that forks and exits over and over must not fill the process table."""
        now = time.monotonic()
        if now - self._tend_at >= self.TEND_INTERVAL:
            self._tend_at = now
            children = _our_children()
            for p in children.values():
                if not p.zombie:
                    self._is_member(p)  # notes the sessions of the trial's live orphans
            _reap(children)

    # -- measuring ---------------------------------------------------------------------
    def cpu_seconds(self) -> float:
        """CPU time (user + system) the trial's processes have used so far (unit: s; never decreases).

        Counts live members, the reaped children they waited for, and members
        that ended since the last reading (at their last reading). Reads the
        known members' ``stat`` at most once per clock tick (`READING_INTERVAL`:
        a script alone costs one read per epoch, and a burst of epochs one read
        in all), their children at most every
        `CHILDREN_INTERVAL` (a wrapper shell's script, found before the next
        full scan), and rescans /proc for new members every `FULL_SCAN_INTERVAL`
        seconds.
        """
        if self.root is None and not self._last:
            return self._cpu  # nothing started yet
        now = time.monotonic()
        if now - self._read_at < self.READING_INTERVAL:
            return self._cpu  # the kernel counts CPU time in clock ticks: a reading within one is the last one
        self._read_at = now
        if now - self._scan_at >= self.FULL_SCAN_INTERVAL:
            self._scan_at = now
            current = self._scan()
        else:  # the members known, and their children (a wrapper shell's script, before the scan finds it)
            children = now - self._children_at >= self.CHILDREN_INTERVAL
            if children:
                self._children_at = now
            current = {}
            todo = list(dict.fromkeys([*self._last, *([self.root] if self.root is not None else [])]))
            seen = set(todo)
            while todo:
                pid = todo.pop()
                p = _read_stat(pid)
                old = self._last.get(pid)
                if p is not None and (old is None or p.start == old.start):
                    current[pid] = p
                    if children:
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
        """Send ``sig`` to the script's process group and, once, to every member outside it (and to every
        process in the trial's cgroup).

        Returns:
            How many processes outside the group were signalled.
        """
        if self.root is not None:
            _killpg(self.root, sig)
        targets = self.members()
        if self.cgroup is not None:
            for pid in self.cgroup.pids():
                p = targets.get(pid) or _read_stat(pid)
                if p is not None and not p.zombie:
                    targets[pid] = p
        n = 0
        for pid, p in targets.items():
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

        The trial's cgroup, if it has one, is killed whole and removed. Then, until two looks in a row
        find nothing: every member found in ``/proc`` and every live member among this process's
        children (where the trial's orphans go: `subreaper`) is killed, and the orphans that
        exited are reaped. A look that reaped an orphan of the trial is not empty: its children were
        handed over at its exit, so the next look finds them. (An orphan that exited before it was seen
        alive is the trial's by its session, or, in a process that runs no other trial, by being one.)

        Returns:
            The pids that were killed (empty when nothing was left).
        """
        killed: list[int] = []
        end = time.monotonic() + timeout
        if self.cgroup is not None:
            killed += self.cgroup.kill()
        quiet = 0
        while quiet < 2:
            if self.root is not None:
                _killpg(self.root, signal.SIGKILL)
            # This process's children first, each killed as it is found: a daemon that forks and exits
            # every few milliseconds is alive there, and seen with its marker, only for a moment.
            children = _our_children()
            found = len(killed)
            for p in children.values():
                if not p.zombie and self._is_member(p):
                    _kill(p, killed)
            # An orphan that exited unseen is known as the trial's by its session, or, where this is the
            # only trial this process runs, by being an orphan at all.
            alone = _REAPING[0] <= 1
            reaped = [p for p in _reap(children) if alone or p.sid in self._sessions or self._is_member(p)]
            live = [p for p in self._scan(kill=killed).values() if not p.zombie]
            if len(killed) == found and not live and not reaped:
                quiet += 1
                continue
            quiet = 0
            if time.monotonic() > end:
                logger.warning("processes %s of the trial survived SIGKILL", sorted(p.pid for p in live))
                break
            if len(killed) == found and not reaped:
                time.sleep(0.01)  # only processes dying of an earlier SIGKILL
        if self.cgroup is not None:
            self.cgroup.remove(max(end - time.monotonic(), 0.0))
            self.cgroup = None
        return killed


def _kill(p: _Proc, killed: list[int]) -> None:
    """SIGKILL a live process, noting its pid in ``killed``."""
    if p.zombie:
        return
    try:
        os.kill(p.pid, signal.SIGKILL)
        killed.append(p.pid)
    except (ProcessLookupError, PermissionError):
        pass


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
