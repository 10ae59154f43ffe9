"""Intensity series and histories for the start planner's tests."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

from tests.factories import make_record
from zeus_run.records import TrialRecord
from zeus_run.rundir.history import HistoryStore

DAY = 86_400.0
STEP = 1_800.0


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def daily(lo: float, hi: float, value: Callable[[float], float], step: float = STEP) -> tuple[list[float], list[float]]:
    """Rows every ``step`` from ``lo`` to ``hi``, each ``value(t)``."""
    times, values = [], []
    t = lo
    while t <= hi:
        times.append(t)
        values.append(value(t))
        t += step
    return times, values


def write_csv(path: Path, times: list[float], values: list[float]) -> Path:
    path.write_text("timestamp,value\n" + "".join(f"{iso(t)},{v}\n" for t, v in zip(times, values, strict=True)))
    return path


def history(run_dir: Path, spans: list[float], start: float, batch_size: int = 2) -> list[TrialRecord]:
    """One converged recurrence a day before ``start`` per span (unit: s), written to ``run_dir``'s history."""
    run_dir.mkdir(parents=True, exist_ok=True)
    records = []
    for i, span in enumerate(spans):
        began = start - (len(spans) - i) * DAY
        records.append(
            make_record(
                i,
                job="t",
                batch_size=batch_size,
                time=span,
                energy=100.0 * span,
                started_at=iso(began),
                ended_at=iso(began + span),
            )
        )
    HistoryStore(run_dir / "history.jsonl").extend(records)
    return records
