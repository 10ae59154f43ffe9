"""Leases: an ask that is never told back (a pod evicted, a node lost) must not block the job.

An ask lives ``lease`` seconds (the spec's ``lease``) past the latest sign of
life of its trial: the ask itself, or a rewrite of the trial's ``heartbeat``
file (the trial agent rewrites it every second; `zeus_run.train.Trial` and
`zeus_run.asktell.heartbeat` rewrite it too), or an event the trial wrote. A
renewal is a file's modification time, so it needs no lock; on a shared
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
from pathlib import Path

from zeus_run.contract import RunningMarker, StopReason, TrialFiles, heartbeat_time
from zeus_run.engine.measure import PowerBasis, lease_span
from zeus_run.engine.record import marker_record
from zeus_run.records import TrialRecord
from zeus_run.rundir.store import read_running
from zeus_run.spec import JobSpec

#: Files whose rewriting shows that an ask's trial lives.
_SIGNS_OF_LIFE = (TrialFiles.HEARTBEAT, TrialFiles.EVENTS, TrialFiles.EPOCHS, TrialFiles.OUTCOME)


def last_sign_of_life(marker: RunningMarker) -> float:
    """When the ask's trial last showed it lives (Unix time, unit: s): the ask, or its newest file."""
    times = [marker.asked_at or 0.0]
    if marker.trial_dir:
        times += [t for name in _SIGNS_OF_LIFE if (t := heartbeat_time(Path(marker.trial_dir) / name)) is not None]
    return max(times)


def expires_at(marker: RunningMarker, default_lease: float) -> float:
    """When the ask's lease runs out (Unix time, unit: s)."""
    return last_sign_of_life(marker) + (marker.lease if marker.lease is not None else default_lease)


def has_expired(marker: RunningMarker, default_lease: float, now: float) -> bool:
    """Whether the ask's lease ran out by ``now``. An ask younger than its lease has not expired whatever its
    files say, so its trial's files are looked at only past that (each report and ask checks every ask)."""
    lease = marker.lease if marker.lease is not None else default_lease
    if (marker.asked_at or 0.0) + lease >= now:
        return False
    return last_sign_of_life(marker) + lease < now


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
