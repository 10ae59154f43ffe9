"""An ask's lease, read from its marker and its trial's files: when it ends, whether it ended.

An ask lives ``lease`` seconds (the spec's ``lease``) past the latest sign of life of its trial: the ask
itself, or a rewrite of the trial's ``heartbeat`` file, or an event the trial wrote (`zeus_run.door.lease`
records the asks whose lease ran out). Pure rules over a marker, standard library only, so a view
(``zeus-run history``) reads them without the doors.
"""

from __future__ import annotations

from pathlib import Path

from zeus_run.contract._heartbeat import heartbeat_time
from zeus_run.contract._marker import RunningMarker
from zeus_run.contract._names import TrialFiles

#: Files whose rewriting shows that an ask's trial lives.
SIGNS_OF_LIFE = (TrialFiles.HEARTBEAT, TrialFiles.EVENTS, TrialFiles.EPOCHS, TrialFiles.OUTCOME)


def last_sign_of_life(marker: RunningMarker) -> float:
    """When the ask's trial last showed it lives (Unix time, unit: s): the ask, or its newest file."""
    times = [marker.asked_at or 0.0]
    if marker.trial_dir:
        times += [t for name in SIGNS_OF_LIFE if (t := heartbeat_time(Path(marker.trial_dir) / name)) is not None]
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
