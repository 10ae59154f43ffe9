"""Where and when a history's trials ran: the provenance fields its records carry, and a recurrence's date."""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zeus_run.records import TrialRecord

#: Provenance fields a trial record may carry (shown when present).
PROVENANCE_FIELDS = ("zeus_run", "host", "gpus", "slurm_job_id")


def provenance(records: Sequence[TrialRecord]) -> dict[str, tuple[str, ...]]:
    """Distinct values of each provenance field the records carry, in first-seen order.

    GPUs read as ``name (uuid)``, joined with ``, `` for a trial that measured several.
    """
    out: dict[str, tuple[str, ...]] = {}
    for name in PROVENANCE_FIELDS:
        seen: Counter[str] = Counter()
        for r in records:
            value = (r.provenance or {}).get(name)
            if value is None or value in ("", [], ()):
                continue
            if isinstance(value, list | tuple):
                text = ", ".join(_gpu_text(v) if isinstance(v, dict) else str(v) for v in value)
            else:
                text = str(value)
            seen[text] += 1
        if seen:
            out[name] = tuple(seen)
    return out


def _gpu_text(gpu: dict) -> str:
    name, uuid = gpu.get("name", "?"), gpu.get("uuid")
    return f"{name} ({uuid})" if uuid else str(name)


def started(record: TrialRecord) -> str | None:
    """``YYYY-MM-DD HH:MMZ`` (UTC) of the record's trigger, or of its start; None without either."""
    stamp = record.triggered_at or record.started_at
    if not stamp:
        return None
    try:
        when = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp[:16]
    if when.tzinfo is not None:
        when = when.astimezone(datetime.timezone.utc)
    return when.strftime("%Y-%m-%d %H:%MZ")
