"""``tell``, ``heartbeat``, ``report_epoch`` and ``expire``: the training side's half of ask/tell.

A tell closes an ask: it builds the trial's record and appends it to the
history under the run-directory lock, so records are folded in the order the
tells arrive (`Session.record`). The record comes from

* ``outcome.json``, when the trial agent ran it (``zeus-run exec``): measured
  where the trial ran, stop rules enforced there; or
* the trial's events (``events.jsonl``: `zeus_run.train.Trial`, a callback,
  `report_epoch`) with the time and energy reported to the tell (marked in the
  record's ``reported``), or measured in the trial's process (`Measured`, the
  Python API; the script's own ``end`` readings), or else imputed (labelled):
  `zeus_run.asktell._outcome`. It is saved by the one saver of every door
  (`zeus_run.door.save`): the history, then the live exports.

``heartbeat`` and ``report_epoch`` take no lock: a lease is renewed by the
modification time of a file in the trial's directory (`zeus_run.door.lease`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import os
import time as _time
from collections.abc import Mapping
from pathlib import Path

from zeus_run import _fs
from zeus_run.asktell._epochs import earlier_answer
from zeus_run.asktell._keys import same_key, stamp
from zeus_run.asktell._outcome import Told, build_record, max_power_of, points, stop_rule, trial_start
from zeus_run.asktell._session import Session, open_session, spec_of
from zeus_run.contract import RunningMarker, StopReason, TrialFiles, exit_text, has_expired, write_heartbeat
from zeus_run.engine.measure import Measured, meter_of
from zeus_run.engine.request import request_of
from zeus_run.errors import AlreadyTold, LeaseExpired, RunDirError, UnknownToken
from zeus_run.records import TrialRecord
from zeus_run.rundir.history import HISTORY_NAME, HistoryStore
from zeus_run.rundir.store import read_running
from zeus_run.rundir.tails import record_lost, record_tail
from zeus_run.trial.events import EpochEvent, EventLogTail
from zeus_run.trial.log import log_tail

logger = logging.getLogger(__name__)

#: Written into the trial's directory by a tell that came after the lease expired (what it reported).
LATE_TELL_NAME = "late_tell.json"


def tell(
    run_dir: str | Path,
    token: str,
    *,
    exit_code: int | None = None,
    energy: float | None = None,
    time: float | None = None,
    message: str | None = None,
    measured: Measured | None = None,
    key: str | None = None,
    compact: bool = False,
    log: str | Path | None = None,
) -> TrialRecord:
    """Close an ask: record its trial and fold it.

    Args:
        run_dir: The run directory.
        token: The ask's token.
        exit_code: The training script's exit code, if known (non-zero: it crashed).
        energy: Energy the trial used (unit: J), when nothing measured it; marked as reported.
        time: Time it ran (unit: s), when nothing measured it; marked as reported.
        message: A note for the record (e.g. the exception that ended it).
        measured: Time and energy measured in the trial's own process.
        key: Idempotency key (`zeus_run.asktell._keys`): a tell that repeats the one that closed
            the ask, with the same key, returns its record again instead of `AlreadyTold`.
        compact: Once the record is in the history, remove the trial's directory if it holds only what the
            record was built from (``events.jsonl``, ``heartbeat``: a server's trial), so a trial leaves
            one history line on disk.
        log: The script's output (a file), when it failed: its tail goes into the record, where the
            classifier (`zeus_run.engine.classify`) tells an environment error from a crash of the batch size.

    Raises:
        LeaseExpired: The ask's lease had expired: it was recorded as an infrastructure failure,
            this tell is refused, and what it reported is kept in the trial's directory.
        AlreadyTold: The ask was already told.
        UnknownToken: The run directory has no such ask.
        KeyReused: ``key`` closed this ask with other contents.
    """
    path = Path(run_dir)
    if log is not None and exit_code not in (None, 0):
        message = "; ".join(filter(None, [message, f"{exit_text(exit_code)}; last output:\n{log_tail(Path(log))}"]))
    told: dict[str, object] = {"exit_code": exit_code, "energy": energy, "time": time, "message": message}
    stamped = None if key is None else stamp(key, "tell", {"token": token, **told})
    with open_session(path, role="tell") as s:
        s.expire()
        marker = _find(s, token)
        if isinstance(marker, TrialRecord):
            if same_key((marker.provenance or {}).get("tell_key"), stamped, "a tell"):
                return marker  # a retry of the tell that closed it: its answer again
            _refuse(s, token, marker, told)
        assert isinstance(marker, RunningMarker)
        request = request_of(marker, s.spec)
        record = build_record(s.spec, marker, Told(exit_code, energy, time, message, measured), s.power)
        record, fault = s.engine.tell(request, record, s.history, True, s.ledger())  # the decision path's tell
        if stamped is not None:  # kept in the record itself: the tell and its key are one durable write
            record = dataclasses.replace(record, provenance={**(record.provenance or {}), "tell_key": stamped})
        s.record(record, marker)
        if fault is not None:  # a spec or environment error, or the first recurrence failed at b0
            logger.error("%s", fault)
        if compact:
            _compact(Path(marker.trial_dir or ""))
        return record


def tell_tail(run_dir: str | Path, token: str, time: float, energy: float, to: str, told: bool | None = None) -> None:
    """Append what a told trial's process spent after its tell, up to its next ask (``to="next-ask"``) or its
    exit (``"exit"``): attached to the trial's record as the history is read (`zeus_run.rundir.tails`); no run
    directory lock (one appended line, under the file's own), and no decision reads it. One tail per trial.

    Args:
        told: Whether ``token``'s trial is known to be in the history (None: looked up).

    Raises:
        ValueError: A figure is negative or not finite, or ``to`` is unknown.
        UnknownToken: No told trial of this run directory has that token.
        TailConflict: The trial has another tail already (the same one again is accepted).
        OSError: The file cannot be written.
    """
    record_tail(run_dir, token, time, energy, to, told)


def tell_tail_lost(run_dir: str | Path, token: str, why: str) -> None:
    """Mark that a told trial's tail could not be measured (``why``): its record says so (``window.tail: lost``)
    instead of nothing (`zeus_run.rundir.tails.record_lost`; errors are logged)."""
    record_lost(run_dir, token, why)


def heartbeat(run_dir: str | Path, token: str) -> float:
    """Renew an ask's lease (rewrites its trial's ``heartbeat`` file; no lock).

    Returns:
        When the lease now runs out (Unix time, unit: s).

    Raises:
        LeaseExpired: It had already expired.
        UnknownToken: No such ask in flight (AlreadyTold: it was told).
    """
    path = Path(run_dir)
    marker, lease = _in_flight(path, token)
    tdir = Path(marker.trial_dir or "")
    try:
        write_heartbeat(tdir / TrialFiles.HEARTBEAT)
    except FileNotFoundError:  # a server's ask makes no trial directory until it is needed
        _make_trial_dir(tdir)
        write_heartbeat(tdir / TrialFiles.HEARTBEAT)
    return _time.time() + lease


def report_epoch(
    run_dir: str | Path,
    token: str,
    epoch: int,
    metric: float,
    *,
    time: float | None = None,
    energy: float | None = None,
    key: str | None = None,
    measured: Mapping[str, object] | None = None,
) -> StopReason | None:
    """Record one validated epoch of an ask's trial (durably) and say whether to stop; renews the lease.

    Args:
        run_dir: The run directory.
        token: The ask's token.
        epoch: The epoch just validated (1-based).
        metric: Its validation metric.
        time: Time since the trial began (unit: s), if the caller measures it (else: since the ask).
        energy: Energy since the trial began (unit: J), if the caller measures it (else the stop rule
            judges on the spec's ``energy.watts`` x time, and the tell records the energy as unmeasured).
        measured: How the caller measures (``source``, ``method``, ``estimated``, ``max_power``), said once.
        key: Idempotency key (`zeus_run.asktell._keys`), kept in the epoch's line of the events.

    An epoch already reported (a retry, with or without its key) is not recorded again: the
    answer is the one it got then.

    Returns:
        Why to stop (`zeus_run.trial.stop.StopRule`: the target, ``max_epochs``, the cost threshold, the
        timeout), or None to go on.

    Raises:
        LeaseExpired, UnknownToken: As `heartbeat`.
        EpochOutOfOrder: ``epoch`` is lower than the last epoch reported.
        KeyReused: ``key`` was used for another report.
    """
    path = Path(run_dir)
    spec = spec_of(path)
    marker, _ = _in_flight(path, token)
    tdir = Path(marker.trial_dir or "")
    request = {"token": token, "epoch": int(epoch), "metric": float(metric), "time": time, "energy": energy}
    stamped = None if key is None else stamp(key, "epoch", request)
    earlier = earlier_answer(tdir / TrialFiles.EVENTS, int(epoch), stamped)
    if earlier is not None:
        return earlier[0]
    now = _time.time()
    tail = EventLogTail(str(tdir / TrialFiles.EVENTS))
    before = tail.finish()
    event: dict[str, object] = {"event": "epoch", "epoch": int(epoch), "metric": float(metric), "time": now}
    if stamped is not None:
        event["key"] = stamped
    if time is not None:
        event["elapsed"] = float(time)
    if energy is not None:
        event["energy"] = float(energy)
    lines: list[dict[str, object]] = []
    if measured and tail.measured is None:  # how the training side measures, said once
        lines.append({"event": "info", "measured": dict(measured), "time": now})
    lines.append(event)
    start = trial_start(tail, marker)
    max_power = max_power_of(spec, None, meter_of(tail.measured or measured, spec.energy.watts))
    prev = points(spec, before[-1:], start, max_power)
    prev_cost = (prev[0][3] or 0.0) if prev else 0.0
    (_, elapsed, _, cost), *_ = points(
        spec, [EpochEvent(int(epoch), float(metric), now, time, energy)], start, max_power
    )
    stop = None
    if cost is not None and elapsed is not None:
        rule = stop_rule(spec, marker)
        curve = [ev.metric for ev in before if ev.epoch < int(epoch)] + [float(metric)]
        stop = rule.after_epoch(int(epoch), float(metric), cost, prev_cost, curve)
        stop = stop or rule.during(elapsed, cost)
    if stop is not None:
        lines.append({"event": "stop", "reason": str(stop), "time": now})
    _append_durably(tdir / TrialFiles.EVENTS, lines)
    return stop


def expire(run_dir: str | Path, now: float | None = None) -> list[TrialRecord]:
    """Record every ask whose lease ran out as an infrastructure failure; returns their records."""
    with open_session(Path(run_dir), role="expire") as s:
        return s.expire(now)


# -- finding the ask ------------------------------------------------------------------------------


def _find(s: Session, token: str) -> RunningMarker | TrialRecord:
    """The ask in flight, or the record of an ask already closed (raises UnknownToken if neither)."""
    for m in s.asks:
        if m.token == token:
            return m
    for r in s.history:
        if (r.provenance or {}).get("ask_token") == token:
            return r
    raise UnknownToken(
        f"token = {token!r}: {str(s.rd.path)!r} has no ask with this token. Pass the token `zeus-run ask` printed "
        "(ZEUS_ASK_TOKEN) with the run directory it named (ZEUS_RUN_DIR)."
    )


def _refuse(s: Session, token: str, record: TrialRecord, reported: dict[str, object]) -> None:
    what = f"recurrence {record.recurrence} try {record.attempt} (trial #{record.trial})"
    if _released(record):
        tdir = s.rd.path / "trials" / TrialFiles.dir_name(record.recurrence, record.attempt)
        with contextlib.suppress(OSError):
            _fs.atomic_write(tdir / LATE_TELL_NAME, json.dumps({**reported, "token": token, "at": _time.time()}) + "\n")
        raise LeaseExpired(
            f"token = {token!r}: too late: the lease of {what} expired ({record.message}). It is recorded as an "
            f"infrastructure failure and its recurrence goes to the next ask; this tell is refused (exit code 3). "
            f"What the trial measured stays in {str(tdir)!r}. Ask again, and renew the lease while training "
            "(zeus-run exec and zeus_run.train.Trial do it; or zeus-run heartbeat), or raise `lease` in the spec."
        )
    raise AlreadyTold(
        f"token = {token!r}: {what} was already told ({record.stop_reason}); nothing was recorded again. "
        "Each ask is told once; ask again for the next trial."
    )


def _released(record: TrialRecord) -> bool:
    """Whether the ask's record is an expiry or a cancel (not a tell): a later tell is too late."""
    prov = record.provenance or {}
    return bool(prov.get("lease_expired") or prov.get("cancelled"))


def _in_flight(path: Path, token: str) -> tuple[RunningMarker, float]:
    """The ask in flight with this token and its lease, read without the lock."""
    spec_lease = spec_of(path).lease
    marker = next((m for m in read_running(path) or [] if m.asked and m.token == token), None)
    if marker is None:
        records = list(HistoryStore(path / HISTORY_NAME).read(warn=False)) if (path / HISTORY_NAME).is_file() else []
        done = next((r for r in records if (r.provenance or {}).get("ask_token") == token), None)
        if done is not None and _released(done):
            raise LeaseExpired(
                f"token = {token!r}: the lease of recurrence {done.recurrence} try {done.attempt} expired; it is "
                "recorded as an infrastructure failure (exit code 3). Stop this trial and ask again."
            )
        if done is not None:
            raise AlreadyTold(f"token = {token!r}: recurrence {done.recurrence} try {done.attempt} was already told.")
        raise UnknownToken(f"token = {token!r}: {str(path)!r} has no ask in flight with this token.")
    if has_expired(marker, spec_lease, _time.time()):
        raise LeaseExpired(
            f"token = {token!r}: the lease of recurrence {marker.recurrence} try {marker.attempt} has expired; the "
            "next ask or tell records it as an infrastructure failure (exit code 3). Stop this trial and ask again."
        )
    return marker, marker.lease if marker.lease is not None else spec_lease


def _append_durably(path: Path, events: list[dict[str, object]]) -> None:
    """Append ``events`` to a trial's event log, fsynced.

    Raises:
        RunDirError: The disk is full (answered as a refusal, as a tell on a full disk is: never a server error).
    """
    try:
        _append(path, events)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise RunDirError(
            f"Run directory {str(path.parent.parent.parent)!r} is full: {path.name} of {path.parent.name} could "
            f"not be written ({exc.strerror}). Free some disk space, then report again."
        ) from None


def _append(path: Path, events: list[dict[str, object]]) -> None:
    data = "".join(json.dumps(ev) + "\n" for ev in events).encode()
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    try:
        fd = _fs.open_fd(path, flags)
    except FileNotFoundError:  # the first report of a server's ask: its trial directory is made now
        _make_trial_dir(path.parent)
        fd = _fs.open_fd(path, flags)
    try:
        _fs.write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_trial_dir(tdir: Path) -> None:
    """Create a trial's directory (and ``trials/``), following no link."""
    for part in (tdir.parent, tdir):
        _fs.make_dir(part)


#: What a trial told through the server leaves in its directory, all of it in its record once told.
_COMPACTED = frozenset({TrialFiles.EVENTS, TrialFiles.HEARTBEAT})


def _compact(tdir: Path) -> None:
    """Remove a told trial's directory if it holds nothing but `_COMPACTED` (the record, fsynced, has it all)."""
    try:
        names = os.listdir(tdir)
    except OSError:
        return  # never made (no report), or already gone
    if not set(names) <= _COMPACTED:
        return  # an agent's files, a plan, output: kept as `zeus-run run` keeps them
    try:
        for name in names:
            os.remove(tdir / name)
        os.rmdir(tdir)
    except OSError as exc:
        logger.info("kept the trial directory %s: %s", tdir, exc.strerror or exc)
