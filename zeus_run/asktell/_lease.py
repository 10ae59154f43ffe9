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
recurrence again. Whatever the trial measured stays in its directory.
"""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

from zeus_run.contract import RunningMarker, StopReason, TrialFiles, heartbeat_time
from zeus_run.records import TrialRecord
from zeus_run.rundir.resume import interrupted_record
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


def expired_record(spec: JobSpec, marker: RunningMarker, now: float) -> TrialRecord:
    """The record of an ask whose lease ran out: its decision, ``infrastructure``, not observed."""
    lease = marker.lease if marker.lease is not None else spec.lease
    quiet = now - last_sign_of_life(marker)
    why = (
        f"lease expired: no tell and no heartbeat for {quiet:.0f} s (lease {lease:g} s) after the ask from "
        f"{marker.host or 'an unknown host'}; an infrastructure failure, not fed to the optimizer and asked again"
    )
    record = interrupted_record(spec, marker)
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
