"""When this process started, as Unix time, and whether ``/proc`` is here (standard library only; Linux ``/proc``)."""

from __future__ import annotations

import datetime
import os
import time


def have_proc() -> bool:
    """Whether processes can be found through ``/proc`` here."""
    return os.path.isfile("/proc/self/stat")


def process_start_time() -> float | None:
    """This process's start time (Unix time, unit: s), or None where ``/proc`` cannot tell.

    A trial told back without an agent counts its time from here, as the agent counts
    from the moment it starts the script: the script's imports are part of its cost.
    """
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            stat = f.read()
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])  # seconds since boot, to the centisecond
        now = time.time()
        ticks = float(stat[stat.rindex(")") + 2 :].split()[19])  # field 22: starttime, clock ticks since boot
        age = uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return now - max(age, 0.0)


def iso_seconds(iso: str | None) -> float | None:
    """Unix time (unit: s) of an ISO-8601 time such as a marker's ``started_at`` or a record's ``triggered_at``
    (naive: UTC; ``Z`` read as UTC), or None for none or one that does not parse."""
    if not iso:
        return None
    try:
        when = datetime.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()
