"""Rendering of the one-line-per-job view (``zeus-run history runs/*``)."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from typing import Any

from zeus_run.cli._render import Grid, fmt_energy, fmt_time
from zeus_run.views.jobs import COLUMNS, JobView, job_rows, total_row


def _pct(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 100:.1f}% saved" if v >= 0 else f"{-v * 100:.1f}% more"


def _row_cells(row: dict[str, Any], estimated: bool) -> list[str]:
    mark = "~" if estimated else ""
    power = "" if row["power_limit"] is None else f" @{row['power_limit']:g} W"
    if row["job"] == "total":
        setting, explore = "", f"{row['exploring']} exploring"
    else:
        setting = f"{row['batch_size']}{power}"
        explore = "exploring" if row["exploring"] else "over"
    steady = "-" if row["steady_cost"] is None else f"{fmt_energy(row['steady_cost'])} ({_pct(row['steady_saving'])})"
    return [
        row["job"] + ("" if row["kind"] in ("real", "") else f" ({row['kind']})"),
        str(row["recurrences"]),
        (row["last_run"] or "-").replace("T", " ").replace("+00:00", "Z"),
        row["outcome"],
        setting,
        explore,
        mark + fmt_energy(row["energy"]),
        fmt_time(row["time"]),
        fmt_energy(row["cost"]),
        _pct(row["saving_cost"]),
        steady,
    ]


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
        ],
        caption="vs default: whole history against always running each job's default batch size; "
        "steady state: mean cost per recurrence now (and its saving); ~: estimated energy",
    )
    for job, row in zip(jobs, job_rows(jobs), strict=True):
        grid.add_row(*_row_cells(row, job.summary.estimated))
    grid.add_row(*_row_cells(total_row(jobs), any(j.summary.estimated for j in jobs)))
    return grid


def write_jobs(jobs: Sequence[JobView], fmt: str) -> None:
    """``json`` (``{"jobs": [...], "total": {...}}``) or ``csv`` (a row per job, then ``total``) on stdout."""
    rows, total = job_rows(jobs), total_row(jobs)
    if fmt == "json":
        json.dump({"jobs": rows, "total": total}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    w = csv.DictWriter(sys.stdout, fieldnames=list(COLUMNS), lineterminator="\n")
    w.writeheader()
    w.writerows([*rows, total])
