"""Each trigger's start plan and what it saved, as the report and the exports show them.

`start_rows` pairs the entries of a run directory's ``starts.jsonl`` (`zeus_run.rundir.starts.read_starts`:
the plan of each trigger, an ``interrupted`` line where the wait was stopped, and the ``outcome`` after the
run) into one `StartRow` per trigger, in the order the triggers were planned. A run directory without the file
(a job without a ``start`` section) has none, and every view shows what it showed before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zeus_run.contract import iso_seconds


@dataclass(frozen=True)
class StartRow:
    """One trigger: its plan and, once it ran, what happened (measured on the intensity series).

    Attributes:
        trigger: When it was triggered (Unix seconds).
        start_at: The planned start.
        deadline: When it was due.
        moved: Whether the start was moved from the trigger.
        reason: Why this start, in one line.
        provenance: Where the forecast came from (``none``: no forecast).
        forecast_now: The forecast at the trigger (unit: g/kWh; None: no forecast).
        forecast_at_start: The forecast mean over the planned run from ``start_at``.
        planned_duration: The duration planned for (unit: s; None: too little history).
        interrupted: The signal that stopped the wait (no trial started), None if none.
        recurrences: The recurrences the trigger ran (empty: not run, or not yet).
        started_at: When its first trial started (ISO-8601; None: not run yet).
        ended_at: When its last trial ended.
        deadline_met: Whether it ended by the deadline (None: not run yet).
        intensity: The intensity over the run (unit: g/kWh; None where the series does not cover it).
        on_time_intensity: The intensity over the same run started at the trigger.
        carbon_g: The run's carbon (unit: gCO2e).
        saved_g: The carbon saved against starting on time (unit: gCO2e; negative: the shift cost carbon).
        saved_share: ``saved_g`` as a share of the on-time carbon.
        note: Why nothing was measured, where nothing was.
    """

    trigger: float
    start_at: float
    deadline: float
    moved: bool
    reason: str
    provenance: str = "none"
    forecast_now: float | None = None
    forecast_at_start: float | None = None
    planned_duration: float | None = None
    interrupted: str | None = None
    recurrences: tuple[int, ...] = ()
    started_at: str | None = None
    ended_at: str | None = None
    deadline_met: bool | None = None
    intensity: float | None = None
    on_time_intensity: float | None = None
    carbon_g: float | None = None
    saved_g: float | None = None
    saved_share: float | None = None
    note: str = ""

    @property
    def delay(self) -> float:
        """How long after the trigger the run was to start (unit: s)."""
        return self.start_at - self.trigger

    @property
    def ran(self) -> bool:
        """Whether its outcome is recorded (the run ended)."""
        return self.started_at is not None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def start_rows(entries: Sequence[dict[str, Any]]) -> list[StartRow]:
    """One row per planned trigger of ``entries`` (`zeus_run.rundir.starts.read_starts`'s), in planning order.

    An entry without a readable trigger, start or deadline is skipped; the first plan, interruption and
    outcome of a trigger count.
    """
    slots: dict[str, dict[str, dict[str, Any]]] = {}
    for e in entries:
        slot = slots.setdefault(str(e.get("trigger")), {})
        slot.setdefault(str(e.get("event", "plan")), e)
    rows = []
    for slot in slots.values():
        p = slot.get("plan")
        if p is None:
            continue
        trigger, start_at, deadline = (iso_seconds(p.get(k)) for k in ("trigger", "start_at", "deadline"))
        if trigger is None or start_at is None or deadline is None:
            continue
        o = slot.get("outcome") or {}
        stopped = slot.get("interrupted")
        recurrences = tuple(int(r) for r in o.get("recurrences") or () if isinstance(r, int))
        rows.append(
            StartRow(
                trigger=trigger,
                start_at=start_at,
                deadline=deadline,
                moved=bool(p.get("moved")),
                reason=str(p.get("reason") or ""),
                provenance=str(p.get("provenance") or "none"),
                forecast_now=_num(p.get("forecast_now")),
                forecast_at_start=_num(p.get("forecast_at_start")),
                planned_duration=_num(p.get("planned_duration_s")),
                interrupted=str(stopped.get("signal") or "a signal") if stopped is not None else None,
                recurrences=recurrences,
                started_at=o.get("started_at"),
                ended_at=o.get("ended_at"),
                deadline_met=o.get("deadline_met") if "deadline_met" in o else None,
                intensity=_num(o.get("intensity")),
                on_time_intensity=_num(o.get("on_time_intensity")),
                carbon_g=_num(o.get("carbon_g")),
                saved_g=_num(o.get("saved_g")),
                saved_share=_num(o.get("saved_share")),
                note=str(o.get("note") or ""),
            )
        )
    return rows


def read_start_rows(run_dir: Path) -> list[StartRow]:
    """The rows of ``run_dir``'s ``starts.jsonl`` (none: empty)."""
    from zeus_run.rundir.starts import read_starts

    return start_rows(read_starts(run_dir))


def saved_total(rows: Sequence[StartRow]) -> float | None:
    """The carbon saved by shifting starts, over every trigger whose saving was measured (unit: gCO2e; None: none)."""
    measured = [r.saved_g for r in rows if r.saved_g is not None]
    return sum(measured) if measured else None
