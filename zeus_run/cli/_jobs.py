"""Rendering of the one-line-per-job view (``zeus-run history runs/*``)."""

from __future__ import annotations

import csv
import json
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

from zeus_run import _units
from zeus_run.cli._render import Grid, fmt_energy, fmt_time
from zeus_run.views.jobs import COLUMNS, JobView, job_rows, total_row
from zeus_run.views.saving import pct


def _saving(value: float | None, ci: list[float] | None) -> str:
    """A saving in a table cell: ``12.4% saved (6.8-17.4%)``; ``no measurable difference`` where 0 is inside."""
    if value is None:
        return "-"
    if ci is None or ci[0] <= 0 <= ci[1]:
        return "no measurable difference"
    lo, hi = (ci[0], ci[1]) if value >= 0 else (-ci[1], -ci[0])
    return f"{pct(value)} ({lo * 100:.1f}-{hi * 100:.1f}%)"


def _row_cells(row: dict[str, Any], estimated: bool, shown: str) -> list[str]:
    mark = "~" if estimated else ""
    power = "" if row["power_limit"] is None else f" @{row['power_limit']:g} W"
    if row["job"] == "total":
        setting, explore = "", f"{row['exploring']} exploring"
    else:
        setting = f"{row['batch_size']}{power}"
        explore = "exploring" if row["exploring"] else "over"
    steady = (
        "-"
        if row["steady_cost"] is None
        else f"{fmt_energy(row['steady_cost'])} ({_saving(row['steady_saving'], row['steady_saving_ci'])})"
    )
    return [
        shown + ("" if row["kind"] in ("real", "") else f" ({row['kind']})"),
        str(row["recurrences"]),
        (row["last_run"] or "-").replace("T", " ").replace("+00:00", "Z"),
        row["outcome"],
        setting,
        explore,
        mark + fmt_energy(row["energy"]),
        fmt_time(row["time"]),
        fmt_energy(row["cost"]),
        _saving(row["saving_cost"], row["saving_cost_ci"]),
        steady,
        "-" if row["carbon_g"] is None else _units.carbon(row["carbon_g"]),
        "-" if row["money"] is None else _units.money(row["money"], row["currency"] or ""),
    ]


def shown_names(jobs: Sequence[JobView]) -> list[str]:
    """Each job's name, with its run directory where another job shares the name (``demo (runs/demo-2)``)."""
    names = Counter(j.name for j in jobs)
    return [j.name if names[j.name] == 1 else f"{j.name} ({j.run_dir})" for j in jobs]


def jobs_grid(jobs: Sequence[JobView]) -> Grid:
    """One line per job, then the total."""
    grid = Grid(
        f"{len(jobs)} job(s)",
        [
            ("job", "left"),
            ("rec", "right"),
            ("last run", "left"),
            ("outcome", "left"),
            ("batch size", "right"),
            ("exploration", "left"),
            ("energy", "right"),
            ("time", "right"),
            ("cost", "right"),
            ("vs default", "right"),
            ("steady state", "right"),
            ("carbon", "right"),
            ("money", "right"),
        ],
        caption="vs default: whole history against always running each job's default batch size, with its 90% "
        "interval (no measurable difference: the interval holds 0); steady state: the cost of a recurrence now "
        "(and its saving); carbon and money: the spec's accounting section (-: none); ~: estimated energy; "
        "a name two run directories share is shown with its run directory",
    )
    for job, row, shown in zip(jobs, job_rows(jobs), shown_names(jobs), strict=True):
        grid.add_row(*_row_cells(row, job.summary.estimated, shown))
    grid.add_row(*_row_cells(total_row(jobs), any(j.summary.estimated for j in jobs), "total"))
    return grid


def write_jobs(jobs: Sequence[JobView], fmt: str) -> None:
    """``json`` (``{"jobs": [...], "total": {...}}``) or ``csv`` (a row per job, then ``total``) on stdout.

    Each saving's interval is ``*_ci``, ``[low, high]`` in JSON and two columns ``*_ci_low``, ``*_ci_high``
    in CSV (empty where none can be stated yet).
    """
    rows, total = job_rows(jobs), total_row(jobs)
    if fmt == "json":
        json.dump({"jobs": rows, "total": total}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    w = csv.DictWriter(sys.stdout, fieldnames=csv_columns(), lineterminator="\n")
    w.writeheader()
    w.writerows([_flat(r) for r in (*rows, total)])


def csv_columns() -> list[str]:
    """`COLUMNS` with each ``*_ci`` as ``*_ci_low`` and ``*_ci_high``."""
    return [c for col in COLUMNS for c in ((f"{col}_low", f"{col}_high") if col.endswith("_ci") else (col,))]


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        if k.endswith("_ci"):
            out[f"{k}_low"], out[f"{k}_high"] = v if v is not None else (None, None)
        else:
            out[k] = v
    return out
