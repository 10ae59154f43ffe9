"""Rich rendering: the live view of a run, and history tables and summaries."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from zeus_run._terminal import printable
from zeus_run.engine import TrialRequest
from zeus_run.records import TrialRecord
from zeus_run.spec import JobSpec
from zeus_run.summary import Summary, recurrence_rows

OUTCOME_STYLE = {
    "target_reached": ("reached", "green"),
    "max_epochs": ("max-epochs", "yellow"),
    "cost_threshold": ("early-stop", "magenta"),
    "exited": ("exited", "yellow"),
    "crashed": ("crashed", "red"),
    "timeout": ("timeout", "red"),
    "interrupted": ("interrupted", "bright_black"),
    "skipped": ("skipped", "bright_black"),
}


def fmt_energy(j: float) -> str:
    """Joules with a readable unit."""
    for unit, scale in (("MJ", 1e6), ("kJ", 1e3)):
        if abs(j) >= scale:
            return f"{j / scale:.2f} {unit}"
    return f"{j:.1f} J"


def fmt_time(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.2f} s"


def outcome_text(reason: str) -> str:
    label, style = OUTCOME_STYLE.get(reason, (reason, "white"))
    return f"[{style}]{label}[/]"


class LiveRunView:
    """Renders a run live: a progress bar over recurrences and a status line for the trial."""

    def __init__(self, console, show_output: bool = True) -> None:
        self.console = console
        self.show_output = show_output
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.task = None
        self.trial_label = ""
        self.estimated = False
        self.epoch_text = ""

    def __enter__(self) -> LiveRunView:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    # RunListener
    def on_run_start(self, spec: JobSpec, run_dir: Path, energy: str, done: int) -> None:
        self.estimated = energy.startswith("estimate")
        what = "Resuming" if done else "Running"
        self.console.print(
            f"[bold]{what} {escape(spec.name)}[/] in {escape(str(run_dir))}: {spec.recurrences} recurrences, batch sizes {list(spec.batch_sizes)}"
        )
        self.console.print(f"Energy: {escape(energy)}")
        self.task = self.progress.add_task("recurrences", total=spec.recurrences, completed=done, status="")

    def on_trial_start(self, req: TrialRequest, learning_rate: float | None, trial_dir: Path) -> None:
        lr = f" lr={learning_rate:.3g}" if learning_rate is not None else ""
        self.trial_label = (
            f"rec {req.recurrence} try {req.attempt}: bs={req.decision.batch_size}{lr} ({req.decision.stage})"
        )
        self.epoch_text = ""
        self._update(0.0, 0.0)

    def on_output(self, line: str) -> None:
        if self.show_output:
            self.console.print(f"[dim]  | {escape(printable(line.rstrip()))}[/]")

    def on_epoch(self, epoch: int, metric: float, time: float, energy: float, cost: float) -> None:
        self.epoch_text = f"epoch {epoch} metric {metric:.4g}"
        self._update(energy, cost)

    def on_tick(self, time: float, energy: float, cost: float) -> None:
        self._update(energy, cost)

    def on_trial_end(self, record: TrialRecord) -> None:
        est = "~" if record.estimated else ""
        self.console.print(
            f"  rec {record.recurrence} try {record.attempt}: bs={record.batch_size:<5} {outcome_text(record.stop_reason)} "
            f"after {record.epochs} epoch(s), {fmt_time(record.time)}, {est}{fmt_energy(record.energy)}, cost {fmt_energy(record.cost)}"
        )
        if record.message and record.stop_reason in ("crashed", "timeout", "exited"):
            self.console.print(
                f"[dim]    {escape(printable(record.message.splitlines()[0]))} (log: {escape(record.log or '')})[/]"
            )
        if record.reached and self.task is not None:
            self.progress.advance(self.task)

    def _update(self, energy: float, cost: float) -> None:
        if self.task is None:
            return
        est = "~" if self.estimated else ""
        parts = [self.trial_label, self.epoch_text, f"{est}{fmt_energy(energy)}", f"cost {fmt_energy(cost)}"]
        self.progress.update(self.task, status=" | ".join(p for p in parts if p))


def history_table(records: Sequence[TrialRecord], title: str) -> Table:
    """One row per recurrence; a recurrence that needed retries lists every batch size tried."""
    table = Table(title=title, title_justify="left", pad_edge=False)
    for col, just in (
        ("rec", "right"),
        ("batch sizes", "right"),
        ("stage", "left"),
        ("epochs", "right"),
        ("time", "right"),
        ("energy", "right"),
        ("cost", "right"),
        ("outcome", "left"),
    ):
        table.add_column(col, justify=just, no_wrap=col != "outcome")
    for row in recurrence_rows(records):
        sizes = ",".join(str(b) for b in row.batch_sizes)
        failed = [o for o in row.outcomes[:-1]]
        outcome = outcome_text(row.outcomes[-1])
        if failed:
            outcome += " after " + ", ".join(outcome_text(o) for o in failed)
        est = "~" if row.estimated else ""
        table.add_row(
            str(row.recurrence),
            sizes,
            row.stages[-1] if row.stages else "",
            str(row.epochs),
            fmt_time(row.time),
            f"{est}{fmt_energy(row.energy)}",
            fmt_energy(row.cost),
            outcome,
        )
    return table


def summary_lines(s: Summary) -> list[str]:
    est = " (estimated: no GPU was measured)" if s.estimated else ""
    lines = [
        f"Recurrences converged: {s.recurrences}   trials: {s.trials}"
        + (f"   interrupted: {s.interrupted}" if s.interrupted else ""),
        f"Batch size chosen over time: {' '.join(str(b) for b in s.chosen) or '-'}",
        f"Best batch size (lowest mean cost when converged): {s.best_batch_size if s.best_batch_size is not None else '-'}"
        f"   default: {s.default_batch_size if s.default_batch_size is not None else '-'}",
        f"Total: energy {fmt_energy(s.total_energy)}{est}, time {fmt_time(s.total_time)}, cost {fmt_energy(s.total_cost)}",
    ]
    if s.savings_cost is not None:
        lines.append(
            f"Against always running the default batch size {s.default_batch_size} "
            f"(its own mean of {fmt_energy(s.default_mean_cost or 0)} per recurrence): "
            f"cost {_pct(s.savings_cost)}, energy {_pct(s.savings_energy)}, time {_pct(s.savings_time)}"
        )
    else:
        lines.append("Savings against the default: unknown (the default batch size never converged in this history)")
    return lines


def _pct(v: float | None) -> str:
    if v is None:
        return "-"
    return f"[green]{v * 100:.1f}% saved[/]" if v >= 0 else f"[red]{-v * 100:.1f}% more[/]"


def write_records(records: Sequence[TrialRecord], fmt: str, summary: Summary | None = None) -> None:
    """Machine-readable output on stdout."""
    rows = [r.to_json() for r in records]
    if fmt == "json":
        out = {"trials": rows}
        if summary is not None:
            out["summary"] = summary.__dict__ | {"chosen": list(summary.chosen)}
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    fields = list(rows[0]) if rows else list(TrialRecord.__dataclass_fields__)
    w = csv.DictWriter(sys.stdout, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        r["metrics"] = " ".join(f"{m:g}" for m in r["metrics"])
        w.writerow(r)
