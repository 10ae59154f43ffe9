"""A trigger's start plan: the job's spec and history in, `zeus_run.start.Plan` out; its record in ``starts.jsonl``.

Every door that starts a recurrence asks `plan_trigger` (``run`` waits for its ``start_at``; ``when`` prints
it for a scheduler that defers on its own). The duration planned for comes from the job's own recurrences
that ended at the batch size and power limit of the last one that reached the target (what the optimizer
exploits): each recurrence's span from its first try's start to its last try's end. The run directory keeps
each trigger's plan, and after the run what happened (`record_plan`, `record_outcome`: ``starts.jsonl``, one
JSON object a line), which ``history`` shows.
"""

from __future__ import annotations

import functools
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeus_run.accounting import J_PER_KWH, AccountingError
from zeus_run.contract import iso_seconds
from zeus_run.errors import UsageError, ZeusRunError
from zeus_run.records import TrialRecord
from zeus_run.rundir.starts import STARTS_NAME, append_start, read_starts
from zeus_run.start import Window, iso

if TYPE_CHECKING:
    from zeus_run.spec import JobSpec
    from zeus_run.start import Forecast, Plan, Series


@dataclass(frozen=True)
class Sources:
    """Where tonight's forecast and the series of what happened come from (None: none)."""

    forecast: Forecast | None
    actual: Series | None
    why: str = ""


def sources(spec: JobSpec) -> Sources:
    """The forecast and actual series ``spec``'s ``start`` and ``accounting`` sections name.

    Raises:
        UsageError: A CSV cannot be read (naming the file and line).
    """
    from zeus_run.start import CsvForecast, Persistence, Provider

    carbon = spec.accounting.carbon_g_per_kwh
    try:
        actual = read_series(carbon) if isinstance(carbon, str) else None
        chosen = spec.start.forecast
        if chosen is None:
            chosen = f"csv:{carbon}" if isinstance(carbon, str) else "none"
        if chosen == "none":
            return Sources(None, actual, "start.forecast is none")
        if chosen == "persistence":
            if actual is None:
                return Sources(None, None, "persistence needs accounting.carbon_g_per_kwh to be a CSV of what happened")
            return Sources(Persistence(actual), actual)
        if chosen.startswith("provider:"):
            name, _, zone = chosen[9:].partition("/")
            return Sources(Provider(name, zone or None, provenance=chosen), actual)
        path = chosen[4:]
        series = read_series(path)
        return Sources(
            CsvForecast(series, provenance=f"csv:{Path(path).name}"), actual if actual is not None else series
        )
    except AccountingError as exc:
        raise UsageError(f"start.forecast: {exc}") from None


def read_series(path: str | Path) -> Series:
    """The intensity CSV at ``path`` as a `zeus_run.start.Series`, parsed once per version of the file (its inode,
    size and modification time): a server plans each ask, and a year of rows takes ~0.1 s to parse.

    Raises:
        AccountingError: It cannot be read (naming the file and line).
    """
    return _read_series(str(path), file_version(path))


def file_version(path: str | Path) -> tuple[int, int, int] | None:
    """A file's version: its inode, size and modification time (None: it cannot be read)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _read_series(path: str, version: tuple[int, int, int] | None) -> Series:
    from zeus_run.start import Series

    return Series.read(path)


def durations(records: Sequence[TrialRecord]) -> list[float]:
    """The spans (unit: s) of the recurrences that reached the target at the batch size and power limit of the last
    one that did; a recurrence without times counts its tries' time."""
    by_rec: dict[int, list[TrialRecord]] = defaultdict(list)
    for r in records:
        by_rec[r.recurrence].append(r)
    done = [rs for _, rs in sorted(by_rec.items()) if any(r.reached for r in rs)]
    if not done:
        return []
    last = next(r for r in reversed(done[-1]) if r.reached)
    key = (last.batch_size, last.power_limit)
    out = []
    for rs in done:
        final = next(r for r in reversed(rs) if r.reached)
        if (final.batch_size, final.power_limit) != key:
            continue
        a, b = iso_seconds(rs[0].started_at), iso_seconds(rs[-1].ended_at)
        out.append(
            b - a if a is not None and b is not None and b > a else sum(r.time + (r.after_time or 0.0) for r in rs)
        )
    return out


def plan_trigger(spec: JobSpec, records: Sequence[TrialRecord], trigger: float) -> Plan:
    """The plan of the trigger at ``trigger`` (Unix seconds) for ``spec`` with its ``records``.

    Raises:
        UsageError: ``spec`` has no ``start`` section, or a forecast cannot be read or fetched.
    """
    from zeus_run.start import plan

    if not spec.start.enabled:
        raise UsageError(
            f"The job {spec.name!r} has no start section: every run starts when it is triggered. Add e.g. "
            'start: {by: "07:00", forecast: {csv: forecast.csv}} to its spec.'
        )
    window = Window.of(trigger, by=spec.start.by, within=spec.start.within)
    src = sources(spec)
    if src.forecast is None:
        p = plan(window, durations(records), None)
        return p if not src.why else _reason(p, f"no forecast ({src.why}): starting on time")
    return plan(window, durations(records), src.forecast, src.actual, min_saving=spec.start.min_saving)


def _reason(p: Plan, reason: str) -> Plan:
    import dataclasses

    return dataclasses.replace(p, reason=reason)


def record_plan(run_dir: Path, p: Plan, **extra: Any) -> None:
    """Append the plan of one trigger to ``starts.jsonl`` (``extra``: e.g. ``outcome: interrupted``)."""
    append_start(run_dir, {"event": "plan", **p.to_dict(), **extra})


def record_outcome(run_dir: Path, p: Plan, new: Sequence[TrialRecord], actual: Series | None) -> dict[str, Any] | None:
    """Append what happened after the plan: the span run, the intensity over it and the carbon saved against starting
    on time (the same run from the trigger), both measured on the actual series; None when nothing ran."""
    ran = [r for r in new if r.started_at]
    if not ran:
        return None
    a, b = iso_seconds(ran[0].started_at), iso_seconds(ran[-1].ended_at)
    out: dict[str, Any] = {
        "event": "outcome",
        "trigger": iso(p.trigger),
        "recurrences": sorted({r.recurrence for r in new}),
        "started_at": ran[0].started_at,
        "ended_at": ran[-1].ended_at,
    }
    energy = sum(r.energy + (r.after_energy or 0.0) for r in new)
    out["energy_j"] = round(energy, 1)
    out["deadline_met"] = b is not None and b <= p.deadline
    if actual is not None and a is not None and b is not None and b > a and actual.covers(p.trigger, b):
        ran_at = float(actual.mean(a, b))
        on_time = float(actual.mean(p.trigger, p.trigger + (b - a)))
        kwh = energy / J_PER_KWH
        out.update(
            intensity=round(ran_at, 1),
            on_time_intensity=round(on_time, 1),
            carbon_g=round(kwh * ran_at, 3),
            saved_g=round(kwh * (on_time - ran_at), 3),
            saved_share=round(1 - ran_at / on_time, 4) if on_time > 0 else None,
        )
    else:
        out["note"] = "the intensity series does not cover the run: nothing measured"
    append_start(run_dir, out)
    return out


def job_of(path: Path) -> tuple[JobSpec, Path, list[TrialRecord]]:
    """The spec, run directory and history behind a JOB.yaml or a RUN_DIR (no history yet: empty).

    Raises:
        UsageError, SpecError, RunDirError: The spec cannot be read, or the path is neither.
    """
    if path.is_dir():
        from zeus_run.rundir.opener import stored_spec

        spec, run_dir = stored_spec(path), path
    else:
        from zeus_run.spec import load_spec

        spec = load_spec(path)
        run_dir = spec.run_dir
    return spec, run_dir, job_of_dir(run_dir)


def job_of_dir(run_dir: Path) -> list[TrialRecord]:
    """The history of ``run_dir`` (none yet: empty)."""
    from zeus_run.rundir.history import HISTORY_NAME, read_history

    path = Path(run_dir) / HISTORY_NAME
    return list(read_history(path, warn=False)) if path.is_file() else []


def ask_start(spec: JobSpec, run_dir: Path, now: float, p: Plan | None = None) -> dict[str, Any] | None:
    """The planned start an ask answers with, for a job with a ``start`` section (None without one): the ask
    is planned as a trigger at ``now`` (``p``: a plan already made for it), as `plan_trigger` plans ``run``'s and
    ``when``'s. A plan that cannot be made (an unreadable forecast) starts now and says why: an ask never fails
    for it.

    Returns:
        ``start_at`` and ``deadline`` (ISO-8601 UTC), ``start_in_s`` (from ``now``, 0 when due), ``moved``,
        ``reason`` (one line), ``status`` (`status`: ``wait``, ``start``, ``late`` or ``missed``), ``trigger``.
    """
    if not spec.start.enabled:
        return None
    if p is None:
        try:
            p = plan_trigger(spec, job_of_dir(run_dir), now)
        except (ZeusRunError, ValueError, OSError) as exc:
            return {
                "start_at": iso(now),
                "start_in_s": 0.0,
                "deadline": None,
                "moved": False,
                "reason": f"no plan ({exc}): start now",
                "status": "start",
                "trigger": iso(now),
            }
    state, _ = status(p, now)
    return {
        "start_at": iso(p.start_at),
        "start_in_s": max(0.0, round(p.start_at - now, 1)),
        "deadline": iso(p.deadline),
        "moved": p.moved,
        "reason": p.reason,
        "status": state,
        "trigger": iso(p.trigger),
    }


def status(p: Plan, now: float) -> tuple[str, str]:
    """Where ``now`` stands against the plan: (``wait``, ``start``, ``late`` or ``missed``, one line for people)."""
    from zeus_run.start import clock

    if now >= p.deadline:
        return "missed", (
            f"the deadline {iso(p.deadline)} of the trigger at {iso(p.trigger)} has passed: the run can no longer "
            "be done in time; start it now or skip it"
        )
    if p.duration is not None and now + p.duration > p.deadline:
        return "late", (
            f"a run started now (planned {p.duration / 3600:.2f} h) would end after the deadline {clock(p.deadline)}: "
            "start now"
        )
    if now < p.start_at:
        return "wait", f"wait until {clock(p.start_at)} ({(p.start_at - now) / 60:.0f} min from now)"
    if p.start_at < now - 60:
        return "start", f"the planned start {clock(p.start_at)} has passed: start now"
    return "start", "start now"


def start_lines(run_dir: Path, last: int = 10) -> list[str]:
    """``history``'s lines on the start plans (the last ``last`` triggers): the plan, then what happened
    (`zeus_run.views.starts.start_rows`, as the report and the exports read them)."""
    from zeus_run.views.starts import start_rows

    rows = start_rows(read_starts(run_dir))
    if not rows:
        return []
    lines = [f"Start plans (the last {min(last, len(rows))} of {len(rows)} trigger(s), {STARTS_NAME}):"]
    for r in rows[-last:]:
        text = f"  trigger {iso(r.trigger)}: start {iso(r.start_at)}, due {iso(r.deadline)}"
        if r.forecast_now is not None:
            text += f"; forecast {r.forecast_now} g/kWh at the trigger, {r.forecast_at_start} at the start"
        text += f" ({r.provenance}): {r.reason}"
        lines.append(text)
        if r.interrupted is not None:
            lines.append(f"    stopped by {r.interrupted} while waiting: no trial started")
        if r.ran:
            ran = f"    ran {r.started_at} to {r.ended_at} (recurrence {', '.join(map(str, r.recurrences))})"
            ran += "" if r.deadline_met else ", AFTER the deadline"
            if r.intensity is not None and r.carbon_g is not None and r.saved_g is not None:
                share = f" ({r.saved_share:+.1%})" if r.saved_share is not None else ""
                ran += (
                    f": {r.intensity} g/kWh over the run against {r.on_time_intensity} on time; "
                    f"{r.carbon_g:.3g} g CO2e, {r.saved_g:+.3g} g saved{share} against starting on time"
                )
            else:
                ran += f": {r.note}"
            lines.append(ran)
    return lines
