"""Joining a running launcher: a scheduler's trigger that finds the run directory held, with overlap allowed.

``zeus-run run JOB.yaml --next K`` while another launcher holds the run
directory exits with code 75, unless the spec allows overlap
(``concurrency > 1``). Then it joins: the trials of its K recurrences run in
the holder's free slots, under the rule ``concurrency: N`` uses, and the
joiner waits for their records and exits as if it had run them.

The protocol is files in ``RUN_DIR/joins/``, each written atomically:

1. The joiner writes a request, ``<id>.json`` (pid, host, K, trigger time).
2. The holder, whenever a slot is free and its own recurrences are all
   started, claims each request by renaming it to ``<id>.claimed.json`` and
   writing there the recurrences it took on: the next K past its own. It
   stamps their records with the joiner's trigger time.
3. The joiner reads which recurrences are its, shows each record as it lands
   in ``history.jsonl``, and ends once every one of them reached the target
   (or the holder let go of the run directory first).

A rename and an unlink of the same request cannot both succeed, so a request
is either claimed (the holder runs it) or withdrawn (the joiner does). If the
holder exits or dies first, its lock is free: the joiner withdraws or keeps
what it was given, takes the run directory over and runs what is left of its
K itself, as a resumed run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from zeus_run import _fs
from zeus_run.errors import RunDirBusy
from zeus_run.records import TrialRecord
from zeus_run.rundir.history import HISTORY_NAME, HistoryStore
from zeus_run.rundir.lock import DEAD_HOLDER_WAIT, holder_role

logger = logging.getLogger(__name__)

JOINS_NAME = "joins"
_CLAIMED = ".claimed.json"
#: Seconds between two looks of a joiner at its request, the history and the holder's lock.
POLL_S = 0.2

T = TypeVar("T")


@dataclass(frozen=True)
class JoinRequest:
    """One trigger's request to a running launcher.

    Attributes:
        id: Its name in ``joins/``.
        pid: The joiner's pid.
        host: The joiner's host.
        recurrences: How many recurrences it asks for (``--next K``).
        triggered_at: When the trigger fired (ISO 8601): stamped on the records.
        granted: The recurrences the holder took on for it (empty: not claimed yet).
        holder: ``pid@host`` of the launcher that claimed it.
    """

    id: str
    pid: int
    host: str
    recurrences: int
    triggered_at: str
    granted: tuple[int, ...] = ()
    holder: str = ""

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["granted"] = list(self.granted)
        return out

    @classmethod
    def from_json(cls, data: Any) -> JoinRequest | None:
        """The request a file holds, or None if it is not one (a damaged or foreign file is ignored)."""
        try:
            return cls(
                id=str(data["id"]),
                pid=int(data["pid"]),
                host=str(data["host"]),
                recurrences=int(data["recurrences"]),
                triggered_at=str(data["triggered_at"]),
                granted=tuple(int(n) for n in data.get("granted") or ()),
                holder=str(data.get("holder") or ""),
            )
        except (KeyError, TypeError, ValueError):
            return None


def _dir(run_dir: Path) -> Path:
    d = run_dir / JOINS_NAME
    _fs.make_dir(d)
    return d


def _read(path: Path) -> JoinRequest | None:
    try:
        with _fs.open_read(path) as f:
            return JoinRequest.from_json(json.loads(f.read(1 << 16)))
    except (OSError, ValueError):
        return None


# -- the joiner's side ---------------------------------------------------------------------


def hold_or_join(take: Callable[[], T], run_dir: Path, wait: float = DEAD_HOLDER_WAIT) -> T | None:
    """Take the run directory for a trigger that may join (``take``: lock it as a launcher), or None: a launcher
    holds it, so join it.

    Two triggers fired at once on a fresh run directory: one takes the lock and names itself in
    ``.lock`` a moment later. Until the name is there, the other cannot tell a launcher (to join) from a
    brief holder (an ask or a tell, to wait for), so it waits, for at most ``wait`` seconds, while the
    lock is held by no launcher it can name: the holder names itself (a launcher: join it), or lets go
    (take it).

    Raises:
        RunDirBusy: Held by a brief holder, or by one that never named itself, past ``wait``.
    """
    deadline = time.monotonic() + wait
    told = False
    while True:
        try:
            return take()
        except RunDirBusy:
            role = holder_role(run_dir)
            if role == "run":
                return None
            if time.monotonic() > deadline:
                raise
            if not told:
                logger.info(
                    "%s is held by %s; waiting for a launcher to join, or for the run directory",
                    run_dir,
                    "a holder that has not named itself yet" if role is None else f"a zeus-run {role}",
                )
                told = True
        time.sleep(POLL_S / 4)


def request(run_dir: Path, recurrences: int, triggered_at: str) -> JoinRequest:
    """Ask the launcher holding ``run_dir`` to run ``recurrences`` more recurrences for this trigger."""
    host = socket.gethostname() or "?"
    req = JoinRequest(f"{os.getpid()}-{host}-{time.time_ns()}", os.getpid(), host, recurrences, triggered_at)
    _fs.atomic_write(_dir(run_dir) / f"{req.id}.json", json.dumps(req.to_json()) + "\n")
    return req


def status(run_dir: Path, req: JoinRequest) -> JoinRequest | None:
    """The request as it stands: claimed (``granted`` set, or being written), pending, or None if withdrawn."""
    d = run_dir / JOINS_NAME
    claimed = _read(d / f"{req.id}{_CLAIMED}")
    if claimed is not None or os.path.lexists(d / f"{req.id}{_CLAIMED}"):
        return claimed if claimed is not None and claimed.holder else dataclasses.replace(req, holder="?")
    return req if os.path.lexists(d / f"{req.id}.json") else None


def withdraw(run_dir: Path, req: JoinRequest) -> bool:
    """Take back a request no launcher claimed; False if one did (it is the holder's now)."""
    try:
        os.unlink(run_dir / JOINS_NAME / f"{req.id}.json")
        return True
    except FileNotFoundError:
        return False


def forget(run_dir: Path, req: JoinRequest) -> None:
    """Remove a claimed request once its recurrences ended (or were taken over)."""
    for name in (f"{req.id}{_CLAIMED}", f"{req.id}.json"):
        try:
            os.unlink(run_dir / JOINS_NAME / name)
        except FileNotFoundError:
            pass


# -- the holder's side ---------------------------------------------------------------------


class JoinDesk:
    """A launcher's desk for join requests: claims them and grows its recurrence budget.

    Args:
        run_dir: The run directory the launcher holds.
        first: The first recurrence number a claimed request may get (past the launcher's own).
        on_more: Told the run's new last recurrence after a claim (the live view's total).
    """

    def __init__(self, run_dir: Path, first: int, on_more: Callable[[int], None] = lambda total: None) -> None:
        self.run_dir = run_dir
        self.next = first
        self.on_more = on_more
        #: The trigger time of each recurrence run for a joiner.
        self.triggers: dict[int, str] = {}
        self._holder = f"{os.getpid()}@{socket.gethostname() or '?'}"

    def claim(self) -> int:
        """Claim every pending request, oldest first; returns how many recurrences were added."""
        d = self.run_dir / JOINS_NAME
        try:
            names = sorted(n for n in os.listdir(d) if n.endswith(".json") and not n.endswith(_CLAIMED))
        except OSError:
            return 0
        added = 0
        for name in names:
            req = _read(d / name)
            if req is not None and _gone(req):
                withdraw(self.run_dir, req)  # a joiner that died waiting: nobody to run it for
                continue
            target = d / name.replace(".json", _CLAIMED)
            try:
                os.rename(d / name, target)  # the joiner's unlink and this rename: only one succeeds
            except OSError:
                continue  # withdrawn meanwhile
            if req is None or req.recurrences < 1:
                os.unlink(target)
                continue
            granted = tuple(range(self.next, self.next + req.recurrences))
            self.next += req.recurrences
            for n in granted:
                self.triggers[n] = req.triggered_at
            claimed = dataclasses.replace(req, granted=granted, holder=self._holder)
            _fs.atomic_write(target, json.dumps(claimed.to_json()) + "\n")
            logger.info(
                "a trigger from pid %d on %s joined this run: recurrence(s) %s run here for it",
                req.pid,
                req.host,
                _span(granted),
            )
            added += req.recurrences
        if added:
            self.on_more(self.next - 1)
        return added


def _gone(req: JoinRequest) -> bool:
    """Whether the joiner is known to have died (its pid is gone from this host)."""
    if req.host != (socket.gethostname() or "?"):
        return False
    try:
        os.kill(req.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _span(ns: tuple[int, ...]) -> str:
    return str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"


# -- waiting ---------------------------------------------------------------------------------


@dataclass
class JoinOutcome:
    """How a join ended.

    Attributes:
        request: The request, as claimed (``granted``) or not.
        records: The records of its recurrences, in the order they were written.
        holder_gone: The holder let go of the run directory before they all ended: what is
            left is the joiner's to run.
        left: How many of the requested recurrences did not end.
        interrupted: What was left behind, if ``cancel`` stopped the wait.
    """

    request: JoinRequest
    records: list[TrialRecord]
    holder_gone: bool
    left: int
    interrupted: str | None = None


def wait_for(
    run_dir: Path,
    req: JoinRequest,
    holder_alive: Callable[[], bool],
    on_record: Callable[[TrialRecord], None],
    cancel: threading.Event,
    on_claim: Callable[[JoinRequest], None] = lambda req: None,
) -> JoinOutcome:
    """Wait until the recurrences granted to ``req`` have ended, or the holder is gone.

    Args:
        run_dir: The run directory.
        req: The request written by `request`.
        holder_alive: Whether a launcher still holds the run directory.
        on_record: Called with each record of the granted recurrences as it lands.
        cancel: Set to stop waiting (SIGINT/SIGTERM): an unclaimed request is withdrawn.
        on_claim: Called once a launcher claimed the request (``granted`` set).
    """
    store = HistoryStore(run_dir / HISTORY_NAME)
    offset = 0
    mine: list[TrialRecord] = []
    current = req
    announced = False
    while True:
        got = status(run_dir, current)
        if got is not None and got.granted:
            current = got
            if not announced:
                logger.info(
                    "joined the launcher %s holding %s: it runs recurrence(s) %s for this trigger",
                    got.holder,
                    run_dir,
                    _span(got.granted),
                )
                on_claim(got)
                announced = True
        records, offset = store.read_from(offset)  # what was appended since the last look
        for r in records:
            if r.recurrence in current.granted:
                mine.append(r)
                on_record(r)
        ended = {r.recurrence for r in mine if r.reached}
        if current.granted and ended >= set(current.granted):
            forget(run_dir, current)
            return JoinOutcome(current, mine, False, 0)
        if cancel.is_set():
            withdrawn = not current.granted and withdraw(run_dir, current)
            if withdrawn:
                what = "while waiting to join the launcher that holds it; the request was withdrawn"
            else:
                span = _span(current.granted) if current.granted else "asked for"
                what = f"while joined; recurrence(s) {span} stay with the launcher that runs them"
            return JoinOutcome(current, mine, False, current.recurrences - len(ended), interrupted=what)
        if not holder_alive():
            if not current.granted and not withdraw(run_dir, current):
                continue  # claimed just now: read what was granted
            forget(run_dir, current)
            left = current.recurrences - len(ended)
            return JoinOutcome(current, mine, True, left)
        cancel.wait(POLL_S)
