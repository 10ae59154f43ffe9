"""Leases: an ask that is never told back (a pod evicted, a node lost) must not block the job.

An ask lives ``lease`` seconds (the spec's ``lease``) past the latest sign of
life of its trial: the ask itself, or a rewrite of the trial's ``heartbeat``
file (the trial agent rewrites it every second; `zeus_run.train.Trial` and
`zeus_run.asktell.heartbeat` rewrite it too), or an event the trial wrote. A
renewal is a file's modification time (`zeus_run.contract.expires_at`, the rule), so it needs no lock; on a shared
filesystem the server stamps it, so the hosts' clocks need only roughly agree
with it (within a fraction of the lease).

An expired ask is recorded as ``infrastructure``: the optimizer does not
observe it and it does not count against ``max_tries``; the next ask runs its
recurrence again. It is charged its span, from the ask to its last sign of
life, as a dead launcher's trial is: the energy imputed from the job's measured
trials and labelled so (``energy_source: unmeasured``,
`zeus_run.engine.measure.lease_span`). Whatever the trial measured stays in its
directory.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from pathlib import Path

from zeus_run.contract import RunningMarker, StopReason, expires_at, has_expired, last_sign_of_life
from zeus_run.door.save import TrialSaver
from zeus_run.engine.measure import PowerBasis, lease_span
from zeus_run.engine.record import marker_record
from zeus_run.errors import BUSY_EXIT_CODE, RunDirBusy
from zeus_run.records import TrialRecord
from zeus_run.rundir.store import RunDir, read_running
from zeus_run.spec import JobSpec

logger = logging.getLogger(__name__)


def expired_record(spec: JobSpec, marker: RunningMarker, now: float, power: PowerBasis) -> TrialRecord:
    """The record of an ask whose lease ran out: its decision, ``infrastructure``, not observed, charged its span.

    Args:
        spec: The job's spec.
        marker: The ask's marker.
        now: Unix time (unit: s).
        power: The job's measured trials' power (what the span's energy is imputed from).
    """
    return _expired(spec.name, spec.lease, marker, now, (power, spec.energy.watts, spec.eta))


def expired_asks(
    path: Path, job: str, default_lease: float, now: float, charge: tuple[PowerBasis, float, float] | None = None
) -> list[TrialRecord]:
    """The asks of run directory ``path`` whose lease ran out, as the records an expiry would append.

    Read-only (``zeus-run history`` shows them as expired without writing): the next ask, tell or
    launcher records them. ``charge``: the job's measured power, its spec's ``energy.watts`` and ``eta``, to
    charge each its span (None: shown without a charge).
    """
    markers = sorted((m for m in read_running(path) or [] if m.asked), key=lambda m: m.trial)
    return [_expired(job, default_lease, m, now, charge) for m in markers if expires_at(m, default_lease) < now]


def _expired(
    job: str,
    default_lease: float,
    marker: RunningMarker,
    now: float,
    charge: tuple[PowerBasis, float, float] | None,
) -> TrialRecord:
    lease = marker.lease if marker.lease is not None else default_lease
    last = last_sign_of_life(marker)
    quiet = now - last
    spent = None if charge is None else lease_span(marker, *charge, end=last)
    why = (
        f"lease expired: no tell and no heartbeat for {quiet:.0f} s (lease {lease:g} s) after the ask from "
        f"{marker.host or 'an unknown host'}; an infrastructure failure, not fed to the optimizer and asked again"
        + (spent[2] if spent is not None else "")
    )
    record = marker_record(job, marker, spent)
    return dataclasses.replace(
        record,
        stop_reason=StopReason.INFRASTRUCTURE,
        message=why,
        cause=why,
        ended_at=_iso(now),
        triggered_at=marker.started_at,  # an ask is its trial's trigger
        provenance={**ask_provenance(marker), "lease_expired": True},
    )


def ask_provenance(marker: RunningMarker) -> dict[str, object]:
    """What a record of an ask says of where it came from: the asking host and the ask's token."""
    return {"host": marker.host or "?", "ask_token": marker.token or ""}


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="milliseconds")


def expire(
    spec: JobSpec, asks: list[RunningMarker], saver: TrialSaver, power: PowerBasis, now: float | None = None
) -> tuple[list[TrialRecord], list[RunningMarker]]:
    """Record every ask whose lease ran out as an infrastructure failure (saved: appended, marker removed), charged
    its span at ``power``, the job's measured trials' power.

    Returns:
        The records of the asks that expired, and the asks that live.
    """
    t = time.time() if now is None else now
    out, live = [], []
    for m in asks:
        if not has_expired(m, spec.lease, t):
            live.append(m)
            continue
        record = expired_record(spec, m, t, power)
        logger.warning("recurrence %d try %d (ask from %s): %s", m.recurrence, m.attempt, m.host or "?", record.message)
        saver.save(record)
        out.append(record)
    return out, live


def settle_asks(rd: RunDir, spec: JobSpec, history: list[TrialRecord], asks: list[RunningMarker]) -> list[TrialRecord]:
    """For a launcher (``zeus-run run``) that holds ``rd``: expire the asks whose lease ran out, and refuse to
    run beside the asks that live (the launcher would decide without them).

    Args:
        rd: The run directory the launcher holds.
        spec: The job.
        history: The history as the launcher read it; expired asks' records are appended to it.
        asks: The asks in flight, in trial order.

    Returns:
        The records of the asks that expired.

    Raises:
        RunDirBusy: Asks are in flight and their leases live.
    """
    if not asks:
        return []
    saver = TrialSaver(rd, spec.export)
    expired, live = expire(spec, asks, saver, PowerBasis.of(history))
    history.extend(expired)
    saver.publish()  # the launcher holds the directory: its exports go now
    if live:
        first = live[0]
        raise RunDirBusy(
            f"Run directory {str(rd.path)!r} is busy: {len(live)} ask(s) are in flight (recurrence "
            f"{first.recurrence} try {first.attempt}, asked from {first.host or '?'} at {first.started_at}). "
            f"Nothing was run (exit code {BUSY_EXIT_CODE}); tell them back (zeus-run tell), or wait for their "
            "lease to expire."
        )
    return expired
