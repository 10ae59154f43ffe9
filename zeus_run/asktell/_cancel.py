"""``cancel``: release an ask that will never be told (its answer was lost, its pod is gone).

Without it such an ask holds its place (``concurrency``, its recurrence) until
its lease runs out. A cancel records it at once as an expiry would: as an
``infrastructure`` failure, not fed to the optimizer, its recurrence asked
again; whatever the trial wrote stays in its directory.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from pathlib import Path

from zeus_run.asktell._session import open_session
from zeus_run.door.lease import expired_record
from zeus_run.errors import AlreadyTold, UnknownToken
from zeus_run.records import TrialRecord


def cancel(run_dir: str | Path, token: str, reason: str | None = None) -> TrialRecord:
    """Record the ask ``token`` as an infrastructure failure now, and forget it.

    Args:
        run_dir: The run directory.
        token: The ask's token.
        reason: Why (for the record); default: cancelled by the operator.

    Returns:
        Its record.

    Raises:
        AlreadyTold: It was already told (or expired, or cancelled).
        UnknownToken: The run directory has no such ask.
        RunDirBusy: A launcher holds the run directory.
    """
    with open_session(Path(run_dir), role="cancel") as s:
        s.expire()
        marker = next((m for m in s.asks if m.token == token), None)
        if marker is None:
            done = next((r for r in s.history if (r.provenance or {}).get("ask_token") == token), None)
            if done is not None:
                raise AlreadyTold(
                    f"token = {token!r}: recurrence {done.recurrence} try {done.attempt} is already closed "
                    f"({done.stop_reason}); nothing was cancelled."
                )
            raise UnknownToken(f"token = {token!r}: {s.rd.path.name!r} has no ask in flight with this token.")
        now = time.time()
        why = (
            f"cancelled{f' ({reason})' if reason else ' by the operator'}: the ask from {marker.host or '?'} was "
            "released before its lease ended; an infrastructure failure, not fed to the optimizer and asked again"
        )
        base = expired_record(s.spec, marker, now, s.power())
        provenance = {k: v for k, v in (base.provenance or {}).items() if k != "lease_expired"}
        record = dataclasses.replace(
            base,
            message=why,
            cause=why,
            ended_at=datetime.datetime.fromtimestamp(now, datetime.timezone.utc).isoformat(timespec="milliseconds"),
            provenance={**provenance, "cancelled": True},
        )
        s.record(record, marker)
        return record
