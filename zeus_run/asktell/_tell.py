"""``tell``, ``heartbeat``, ``report_epoch`` and ``expire``: the training side's half of ask/tell.

A tell closes an ask: it builds the trial's record and appends it to the
history under the run-directory lock, so records are folded in the order the
tells arrive (`Session.record`). The record comes from

* ``outcome.json``, when the trial agent ran it (``zeus-run exec``): measured
  where the trial ran, stop rules enforced there; or
* the trial's events (``events.jsonl``: `zeus_run.train.Trial`, a callback,
  `report_epoch`) with the time and energy reported to the tell (marked in the
  record's ``reported``), or measured in the trial's process (`Measured`, the
  Python API), or else estimated from the events' times (labelled).

``heartbeat`` and ``report_epoch`` take no lock: a lease is renewed by the
modification time of a file in the trial's directory (`zeus_run.asktell._lease`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import time as _time
from dataclasses import dataclass
from pathlib import Path

from zeus_run import _fs
from zeus_run.asktell._lease import ask_provenance, expires_at
from zeus_run.asktell._session import Session, open_session, spec_of
from zeus_run.contract import RunningMarker, StopReason, TrialFiles, TrialOutcome, crash_cause, write_heartbeat
from zeus_run.cost import zeus_cost
from zeus_run.errors import AlreadyTold, LeaseExpired, UnknownToken
from zeus_run.executors._base import now
from zeus_run.records import TrialRecord
from zeus_run.rundir.history import HISTORY_NAME, HistoryStore
from zeus_run.rundir.resume import interrupted_record, request_of
from zeus_run.rundir.store import read_running
from zeus_run.spec import JobSpec
from zeus_run.trial.agent import read_agent_info, read_outcome
from zeus_run.trial.events import EventLogTail

logger = logging.getLogger(__name__)

#: Written into the trial's directory by a tell that came after the lease expired (what it reported).
LATE_TELL_NAME = "late_tell.json"


@dataclass(frozen=True)
class Measured:
    """Time and energy measured in the trial's own process (the Python API's `zeus_run.asktell.Job`).

    Attributes:
        time: Unit: s.
        energy: Unit: J.
        source: The energy source's name (``nvml``, ``rapl``, ``estimate``).
        estimated: Whether the energy is an estimate.
        method: How it was obtained.
        max_power: Max power for the cost (unit: W).
    """

    time: float
    energy: float
    source: str
    estimated: bool
    method: str | None
    max_power: float


def tell(
    run_dir: str | Path,
    token: str,
    *,
    exit_code: int | None = None,
    energy: float | None = None,
    time: float | None = None,
    message: str | None = None,
    measured: Measured | None = None,
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

    Raises:
        LeaseExpired: The ask's lease had expired: it was recorded as an infrastructure failure,
            this tell is refused, and what it reported is kept in the trial's directory.
        AlreadyTold: The ask was already told.
        UnknownToken: The run directory has no such ask.
    """
    path = Path(run_dir)
    with open_session(path, role="tell") as s:
        s.expire()
        marker = _find(s, token)
        if isinstance(marker, TrialRecord):
            _refuse(s, token, marker, {"exit_code": exit_code, "energy": energy, "time": time, "message": message})
        assert isinstance(marker, RunningMarker)
        record = _record(s.spec, marker, _Told(exit_code, energy, time, message, measured))
        request = request_of(marker, s.spec)
        engine = s.ledger().engine
        record, spec_fault = engine.settle(request, record, s.history, stamp=True)
        s.record(record, marker)
        if spec_fault is not None:
            logger.error("%s", spec_fault)
        return record


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
    write_heartbeat(Path(marker.trial_dir or "") / TrialFiles.HEARTBEAT)
    return _time.time() + lease


def report_epoch(
    run_dir: str | Path,
    token: str,
    epoch: int,
    metric: float,
    *,
    time: float | None = None,
    energy: float | None = None,
) -> StopReason | None:
    """Record one validated epoch of an ask's trial (durably) and say whether to stop; renews the lease.

    Args:
        run_dir: The run directory.
        token: The ask's token.
        epoch: The epoch just validated (1-based).
        metric: Its validation metric.
        time: Time since the trial began (unit: s), if the caller measures it (else: since the ask).
        energy: Energy since the trial began (unit: J), if the caller measures it (else: the spec's estimate).

    Returns:
        Why to stop (the target, ``max_epochs``, the cost threshold), or None to go on.

    Raises:
        LeaseExpired, UnknownToken: As `heartbeat`.
    """
    path = Path(run_dir)
    spec = spec_of(path)
    marker, _ = _in_flight(path, token)
    tdir = Path(marker.trial_dir or "")
    now = _time.time()
    event: dict[str, object] = {"event": "epoch", "epoch": int(epoch), "metric": float(metric), "time": now}
    if time is not None:
        event["elapsed"] = float(time)
    if energy is not None:
        event["energy"] = float(energy)
    stop = _stop_rule(spec, marker, int(epoch), float(metric), now, time, energy)
    lines = [event] + ([{"event": "stop", "reason": str(stop), "time": now}] if stop is not None else [])
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
    if (record.provenance or {}).get("lease_expired"):
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


def _in_flight(path: Path, token: str) -> tuple[RunningMarker, float]:
    """The ask in flight with this token and its lease, read without the lock."""
    spec_lease = spec_of(path).lease
    marker = next((m for m in read_running(path) or [] if m.asked and m.token == token), None)
    if marker is None:
        records = list(HistoryStore(path / HISTORY_NAME).read(warn=False)) if (path / HISTORY_NAME).is_file() else []
        done = next((r for r in records if (r.provenance or {}).get("ask_token") == token), None)
        if done is not None and (done.provenance or {}).get("lease_expired"):
            raise LeaseExpired(
                f"token = {token!r}: the lease of recurrence {done.recurrence} try {done.attempt} expired; it is "
                "recorded as an infrastructure failure (exit code 3). Stop this trial and ask again."
            )
        if done is not None:
            raise AlreadyTold(f"token = {token!r}: recurrence {done.recurrence} try {done.attempt} was already told.")
        raise UnknownToken(f"token = {token!r}: {str(path)!r} has no ask in flight with this token.")
    if expires_at(marker, spec_lease) < _time.time():
        raise LeaseExpired(
            f"token = {token!r}: the lease of recurrence {marker.recurrence} try {marker.attempt} has expired; the "
            "next ask or tell records it as an infrastructure failure (exit code 3). Stop this trial and ask again."
        )
    return marker, marker.lease if marker.lease is not None else spec_lease


# -- the record -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Told:
    """What a tell says of its trial (see `tell`'s arguments)."""

    exit_code: int | None
    energy: float | None
    time: float | None
    message: str | None
    measured: Measured | None


def _record(spec: JobSpec, marker: RunningMarker, told: _Told) -> TrialRecord:
    tdir = Path(marker.trial_dir or "")
    base = interrupted_record(spec, marker)
    outcome = read_outcome(tdir)
    source: tuple[float, str, bool, str | None] = (spec.energy.watts, "estimate", True, "watts-x-time")
    reported: list[str] = []
    if outcome is not None:  # the agent ran it (zeus-run exec): measured where it ran
        measured_by = (read_agent_info(tdir) or {}).get("energy") or {}
        source = (
            float(measured_by.get("max_power") or outcome.max_power),
            str(measured_by.get("name") or "estimate"),
            bool(measured_by.get("estimated", True)),
            measured_by.get("method"),
        )
    else:
        outcome, reported = _from_events(spec, marker, told)
        measured = told.measured
        if measured is not None and "energy" not in reported:
            source = (measured.max_power, measured.source, measured.estimated, measured.method)
        elif "energy" in reported:
            source = (spec.energy.watts, "reported", False, None)
    notes = [n for n in (told.message, outcome.message) if n]
    return dataclasses.replace(
        base,
        **{**outcome.record_fields(), "exit_code": told.exit_code if outcome.exit_code is None else outcome.exit_code},
        energy_source=source[1],
        estimated=source[2],
        energy_method=source[3],
        message="; ".join(dict.fromkeys(notes)) or None,
        ended_at=now(),
        triggered_at=marker.started_at,  # an ask is its trial's trigger
        provenance={**ask_provenance(marker), **_where(tdir)},
        reported=" ".join(reported) or None,
    )


def _from_events(spec: JobSpec, marker: RunningMarker, told: _Told) -> tuple[TrialOutcome, list[str]]:
    """The outcome of a trial no agent watched: its events, and the time and energy reported or measured."""
    exit_code, energy, time, measured = told.exit_code, told.energy, told.time, told.measured
    tail = EventLogTail(str(Path(marker.trial_dir or "") / TrialFiles.EVENTS))
    events = tail.finish()
    hits = [i for i, e in enumerate(events) if _hits(spec, e.metric)]
    judged = events[: hits[0] + 1] if hits else events  # counted up to the point it was judged
    reported: list[str] = []
    last = judged[-1] if judged else None
    start = tail.started if tail.started is not None else (marker.asked_at or _time.time())
    end = last.time if last is not None and last.time is not None else _time.time()
    t = max(end - start, 0.0)
    if time is not None:
        t, reported = float(time), [*reported, "time"]
    elif last is not None and last.elapsed is not None:
        t, reported = last.elapsed, [*reported, "time"]
    elif measured is not None:
        t = measured.time
    max_power = measured.max_power if measured is not None else spec.energy.watts
    e = spec.energy.watts * t
    if energy is not None:
        e, reported = float(energy), [*reported, "energy"]
    elif last is not None and last.energy is not None:
        e, reported = last.energy, [*reported, "energy"]
    elif measured is not None:
        e = measured.energy
    if hits:
        reason = StopReason.TARGET_REACHED
    elif tail.stop == StopReason.COST_THRESHOLD.value:
        reason = StopReason.COST_THRESHOLD
    elif exit_code not in (None, 0):
        reason = StopReason.CRASHED
    elif len(events) >= spec.max_epochs:
        reason = StopReason.MAX_EPOCHS
    else:
        reason = StopReason.EXITED
    outcome = TrialOutcome(
        epochs=len(judged),
        time=t,
        energy=e,
        max_power=max_power,
        cost=zeus_cost(e, t, spec.eta, max_power),
        reached=bool(hits),
        stop_reason=reason,
        exit_code=exit_code,
        metrics=tuple(ev.metric for ev in judged),
        malformed=tail.malformed,
        cause=crash_cause(reason, told.message, exit_code),
    )
    return outcome, reported


def _stop_rule(
    spec: JobSpec, marker: RunningMarker, epoch: int, metric: float, now: float, t: float | None, e: float | None
) -> StopReason | None:
    """The stop rules a trial without an agent is held to after each epoch (the agent's, on reported figures)."""
    if _hits(spec, metric):
        return StopReason.TARGET_REACHED
    if epoch >= spec.max_epochs:
        return StopReason.MAX_EPOCHS
    if marker.cost_threshold is None or epoch < 1:
        return None
    elapsed = t if t is not None else max(now - (marker.asked_at or now), 0.0)
    used = e if e is not None else spec.energy.watts * elapsed
    cost = zeus_cost(used, elapsed, spec.eta, spec.energy.watts)
    if cost + cost / epoch > marker.cost_threshold:  # the next epoch would cross it
        return StopReason.COST_THRESHOLD
    return None


def _hits(spec: JobSpec, metric: float) -> bool:
    if not math.isfinite(metric):
        return False
    return metric >= spec.target_metric if spec.higher_is_better else metric <= spec.target_metric


def _where(tdir: Path) -> dict[str, object]:
    """Where the trial ran, from ``agent.json`` when an agent ran it."""
    agent = read_agent_info(tdir) or {}
    out: dict[str, object] = {}
    if agent.get("host"):
        out["trial_host"] = agent["host"]
    devices = (agent.get("energy") or {}).get("devices")
    if devices:
        out["gpus"] = devices
    return out


def _append_durably(path: Path, events: list[dict[str, object]]) -> None:
    data = "".join(json.dumps(ev) + "\n" for ev in events).encode()
    fd = _fs.open_fd(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        _fs.write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
