"""The asks in flight of a run directory, as ``zeus-run history`` lists them (with how to release one)."""

from __future__ import annotations

import datetime
import shlex
import time
from pathlib import Path

from zeus_run.contract import RunningMarker, expires_at
from zeus_run.rundir.settings import RunSettings
from zeus_run.rundir.store import read_running


def asks_in_flight(run_dir: Path) -> list[RunningMarker]:
    """The asks ``running.json`` holds, in trial order (none if it is missing or unreadable)."""
    return sorted((m for m in read_running(run_dir) or [] if m.asked), key=lambda m: m.trial)


def in_flight_lines(run_dir: Path, now: float | None = None, settings: RunSettings | None = None) -> list[str]:
    """One line per ask in flight: its trial, batch size, where it was asked from, when its lease ends, its token."""
    asks = asks_in_flight(run_dir)
    if not asks:
        return []
    t = time.time() if now is None else now
    settings = RunSettings.read(run_dir) if settings is None else settings
    lease = settings.lease if settings.lease is not None else 600.0
    out = [f"{len(asks)} ask(s) in flight (release one that will never be told: zeus-run cancel RUN_DIR TOKEN):"]
    for m in asks:
        left = expires_at(m, lease) - t
        until = datetime.datetime.fromtimestamp(t + left, datetime.timezone.utc).isoformat(timespec="seconds")
        ends = f"lease ends in {left:.0f} s ({until})" if left > 0 else "lease over (recorded at the next ask or tell)"
        out.append(
            f"  recurrence {m.recurrence} try {m.attempt} (trial #{m.trial}): batch size {m.batch_size}, asked from "
            f"{m.host or '?'} at {m.started_at or '?'}; {ends}; token {shlex.quote(m.token or '?')}"
        )
    return out
