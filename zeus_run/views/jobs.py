"""Many jobs at once: a run directory read as one job, and one line per job.

`load_job` reads a run directory (real, simulated or replayed) into a `JobView`:
its records, their `zeus_run.views.summary.Summary` and what a dashboard shows of it
(current batch size and power limit, the last recurrence and its outcome).
`expand_run_dirs` turns command-line arguments (run directories, or folders
holding them) into run directories; `job_rows` and `total_row` are the lines
of ``zeus-run history runs/*``. Exporters (`zeus_run.export`) and the HTML
report (`zeus_run.views.report`) read jobs through here too, so every view shows
the same figures.

This module is imported by the command line's help, so it imports only the
standard library at module level.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeus_run.errors import UsageError

if TYPE_CHECKING:
    from zeus_run.records import TrialRecord
    from zeus_run.views.summary import Summary

#: The history file's name in a run directory (`zeus_run.rundir.history.HISTORY_NAME`).
_HISTORY = "history.jsonl"


def default_batch_size_of(run_dir: Path) -> int | None:
    """b0 from the run directory's resolved ``spec.yaml``, if there is one."""
    import yaml

    try:
        data = yaml.safe_load((run_dir / "spec.yaml").read_text(encoding="utf-8")) or {}
        value = data.get("default_batch_size")
        return int(value) if value is not None else None
    except (OSError, yaml.YAMLError, ValueError, AttributeError, TypeError):
        return None


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` is a run directory with a history."""
    return (path / _HISTORY).is_file()


def many_jobs(paths: Sequence[Path]) -> bool:
    """Whether command-line ``paths`` name several jobs: more than one, or one folder of run directories."""
    if len(paths) != 1:
        return True
    p = paths[0]
    return p.is_dir() and not is_run_dir(p) and any(d.is_dir() and is_run_dir(d) for d in p.iterdir())


def expand_run_dirs(paths: Iterable[Path]) -> list[Path]:
    """Run directories named by ``paths``: each is a run directory, its history.jsonl, or a folder of run directories.

    Raises:
        UsageError: A path is none of these (the message names it), or two paths are the same run.
    """
    out: list[Path] = []
    for p in paths:
        if p.is_file() and p.name == _HISTORY:
            found = [p.parent]
        elif is_run_dir(p):
            found = [p]
        elif p.is_dir():
            found = sorted(d for d in p.iterdir() if d.is_dir() and is_run_dir(d))
            if not found:
                raise UsageError(
                    f"{str(p)!r} holds no run directory (no history.jsonl in it or in its folders); "
                    "pass run directories, e.g. runs/demo, or a folder of them, e.g. runs."
                )
        else:
            raise UsageError(f"{str(p)!r} is not a run directory; pass e.g. runs/demo, or a folder of them.")
        for d in found:
            if any(d.resolve() == o.resolve() for o in out):
                raise UsageError(f"run directory {str(d)!r} is named twice; pass each once.")
            out.append(d)
    return out


@dataclass(frozen=True)
class JobView:
    """One run directory, read once.

    Attributes:
        run_dir: The run directory.
        name: Job name (the records' ``job``).
        records: Every trial record, in history order.
        summary: Their summary.
        kind: ``real``, ``simulated`` or ``replayed`` (the first record's).
        gpu: GPU model(s) the trials measured, or None where unknown.
        last_ended: End of the last trial (UTC), or the history file's last change for records without times.
    """

    run_dir: Path
    name: str
    records: tuple[TrialRecord, ...]
    summary: Summary
    kind: str
    gpu: str | None
    last_ended: datetime

    @property
    def last(self) -> TrialRecord:
        """The last trial recorded."""
        return self.records[-1]

    @property
    def batch_size(self) -> int:
        """The batch size zeus-run ran last (the current one)."""
        return self.last.batch_size

    @property
    def power_limit(self) -> float | None:
        """The power limit of the last trial (unit: W), None where none was set."""
        return self.last.power_limit

    @property
    def exploring(self) -> bool:
        """Whether exploration is still going."""
        return self.summary.exploration is not None and self.summary.exploration.exploring


def load_job(run_dir: Path) -> JobView:
    """Read a run directory into a `JobView`.

    Raises:
        HistoryError: No readable history.
        UsageError: The history has no trial yet.
    """
    from zeus_run.rundir.history import read_history
    from zeus_run.views.summary import summarize

    records = tuple(read_history(run_dir))
    if not records:
        raise UsageError(f"run directory {str(run_dir)!r} has no trials yet; run it first.")
    summary = summarize(records, default_batch_size_of(run_dir))
    gpus = sorted({str(g.get("name")) for r in records for g in (r.provenance or {}).get("gpus") or [] if g})
    return JobView(
        run_dir=run_dir,
        name=records[0].job,
        records=records,
        summary=summary,
        kind=records[0].kind,
        gpu=",".join(gpus) or None,
        last_ended=_last_ended(run_dir, records),
    )


def _last_ended(run_dir: Path, records: Sequence[TrialRecord]) -> datetime:
    for r in reversed(records):
        if r.ended_at:
            try:
                t = datetime.fromisoformat(r.ended_at)
            except ValueError:
                continue
            return t if t.tzinfo else t.replace(tzinfo=timezone.utc)
    return datetime.fromtimestamp((run_dir / _HISTORY).stat().st_mtime, tz=timezone.utc)


def outcome_text(job: JobView) -> str:
    """How the last recurrence ended: ``reached``, or its last try's stop reason."""
    last = job.last
    return "reached" if last.reached else last.stop_reason


#: Columns of `job_rows` (and of ``history runs/* --format csv``), in order.
COLUMNS = (
    "job",
    "kind",
    "recurrences",
    "trials",
    "last_run",
    "outcome",
    "batch_size",
    "power_limit",
    "exploring",
    "energy",
    "time",
    "cost",
    "saving_cost",
    "saving_energy",
    "saving_time",
    "steady_cost",
    "steady_saving",
    "run_dir",
)


def job_rows(jobs: Sequence[JobView]) -> list[dict[str, Any]]:
    """One row per job (`COLUMNS`): units J and s, savings as fractions against the default."""
    rows = []
    for j in jobs:
        s = j.summary
        rows.append(
            {
                "job": j.name,
                "kind": j.kind,
                "recurrences": s.recurrences,
                "trials": s.trials,
                "last_run": j.last_ended.isoformat(timespec="seconds"),
                "outcome": outcome_text(j),
                "batch_size": j.batch_size,
                "power_limit": j.power_limit,
                "exploring": j.exploring,
                "energy": s.total_energy,
                "time": s.total_time,
                "cost": s.total_cost,
                "saving_cost": s.savings_cost,
                "saving_energy": s.savings_energy,
                "saving_time": s.savings_time,
                "steady_cost": s.steady.mean_cost if s.steady else None,
                "steady_saving": s.steady.savings if s.steady else None,
                "run_dir": str(j.run_dir),
            }
        )
    return rows


def total_row(jobs: Sequence[JobView]) -> dict[str, Any]:
    """The total over ``jobs`` (`COLUMNS`): sums, and savings against every job's default together.

    A job without a default baseline (no converged default run yet) counts in the
    sums but not in the savings.
    """
    s = [j.summary for j in jobs]
    saving: dict[str, float | None] = {}
    for key in ("cost", "energy", "time"):
        pairs = [
            (getattr(x, f"total_{key}"), getattr(x, f"baseline_{key}"))
            for x in s
            if getattr(x, f"baseline_{key}") is not None
        ]
        base = sum(b for _, b in pairs)
        saving[key] = 1.0 - sum(t for t, _ in pairs) / base if pairs and base > 0 else None
    return {
        "job": "total",
        "kind": "",
        "recurrences": sum(x.recurrences for x in s),
        "trials": sum(x.trials for x in s),
        "last_run": max(j.last_ended for j in jobs).isoformat(timespec="seconds") if jobs else None,
        "outcome": "",
        "batch_size": None,
        "power_limit": None,
        "exploring": sum(1 for j in jobs if j.exploring),
        "energy": sum(x.total_energy for x in s),
        "time": sum(x.total_time for x in s),
        "cost": sum(x.total_cost for x in s),
        "saving_cost": saving["cost"],
        "saving_energy": saving["energy"],
        "saving_time": saving["time"],
        "steady_cost": None,
        "steady_saving": None,
        "run_dir": "",
    }
