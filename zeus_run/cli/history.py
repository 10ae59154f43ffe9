"""``zeus-run history``: the recurrence table and summary of a run."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml

from zeus_run.cli._common import FormatOption, check_format, handle_errors, out_console, setup_logging
from zeus_run.cli._render import history_table, summary_lines, write_records
from zeus_run.history import read_history, resolve_history_path
from zeus_run.summary import summarize


def default_batch_size_of(history_file: Path) -> int | None:
    """b0 from the run directory's resolved spec, if there is one."""
    spec_file = history_file.parent / "spec.yaml"
    try:
        data = yaml.safe_load(spec_file.read_text(encoding="utf-8")) or {}
        value = data.get("default_batch_size")
        return int(value) if value is not None else None
    except (OSError, yaml.YAMLError, ValueError, AttributeError):
        return None


@handle_errors
def history_command(
    path: Path = typer.Argument(..., metavar="PATH", help="A run directory or its history.jsonl."),
    fmt: str = FormatOption,
    trials: bool = typer.Option(False, "--trials", help="With --format table: also list every trial."),
) -> None:
    """Show a run's recurrences: batch size chosen, epochs, time, energy, cost, outcome, and the savings.

    Example:

        zeus-run history runs/demo

        zeus-run history runs/demo --format csv > demo.csv
    """
    setup_logging()
    check_format(fmt)
    hist = resolve_history_path(path)
    records = read_history(hist)
    summary = summarize(records, default_batch_size_of(hist))
    if fmt != "table":
        write_records(records, fmt, summary)
        return
    out_console.print(history_table(records, f"{len(records)} trial(s) in {hist}"))
    if trials:
        for r in records:
            out_console.print(
                f"  #{r.trial} rec {r.recurrence} try {r.attempt} bs={r.batch_size} {r.stop_reason} epochs={r.epochs} "
                f"cost={r.cost:.1f} J metrics={list(r.metrics)}"
                + (f" exit={r.exit_code} ended={r.ended}" if r.ended else "")
                + (f" after={r.after_time:.2f}s" if r.after_time else "")
            )
    for line in summary_lines(summary):
        out_console.print(line)
