"""``zeus-run history``: the recurrence table and summary of a run."""

from __future__ import annotations

from pathlib import Path

import typer

from zeus_run.cli._common import Format, FormatOption, handle_errors, out_console, run_dir_history, setup_logging
from zeus_run.jobs import many_jobs


def default_batch_size_of(history_file: Path) -> int | None:
    """b0 from the run directory's resolved spec, if there is one."""
    from zeus_run.jobs import default_batch_size_of as of_run_dir

    return of_run_dir(history_file.parent)


@handle_errors
def history_command(
    paths: list[Path] = typer.Argument(
        ...,
        metavar="RUN_DIR...",
        help="A run directory (e.g. runs/demo) or its history.jsonl; several, or a folder of them (runs/*, runs): one line per job.",
    ),
    fmt: Format = FormatOption,
    trials: bool = typer.Option(False, "--trials", help="With --format table: also list every trial."),
) -> None:
    """Show a run's recurrences, per-batch-size statistics, the savings and a recommended setting.

    With several run directories (or a folder of them): one line per job
    (recurrences, last run and its outcome, current batch size and power
    limit, whether exploration is over, energy, time, cost, the saving against
    the default and the steady state), then a total line.

    The table has one row per recurrence (a failed try shows its cause, e.g.
    `crashed (RuntimeError: CUDA out of memory)`). Below it: per batch size,
    trials, converged runs, mean and std of cost, epochs, time and energy; a
    sparkline of cost per recurrence; whether exploration is still going; the
    default batch size's mean and how many runs it rests on; the steady state
    (the last recurrences after exploration against the default); and the
    recommended batch size, learning rate and power limit.

    Example:

        zeus-run history runs/demo

        zeus-run history runs/demo --format csv > demo.csv

        zeus-run history runs/*   (one line per job, then a total)
    """
    from zeus_run.cli._render import (
        batch_size_table,
        can_encode,
        history_table,
        print_grid,
        summary_lines,
        write_records,
    )
    from zeus_run.history import read_history
    from zeus_run.recommend import believed_best
    from zeus_run.summary import failure_reason, summarize

    setup_logging()
    if many_jobs(paths):
        _history_of_jobs(paths, fmt)
        return
    hist = run_dir_history(paths[0])
    records = read_history(hist)
    summary = summarize(records, default_batch_size_of(hist), belief=believed_best(records, hist.parent))
    if fmt is not Format.table:
        write_records(records, fmt.value, summary)
        return
    out = out_console()
    print_grid(out, history_table(records, f"{len(records)} trial(s) in {hist}"))
    if trials:
        for r in records:
            reason = failure_reason(r)
            out.print(
                f"  #{r.trial} rec {r.recurrence} try {r.attempt} bs={r.batch_size} {r.stop_reason} epochs={r.epochs} "
                f"cost={r.cost:.1f} J metrics={list(r.metrics)}"
                + (f" exit={r.exit_code} ended={r.ended}" if r.ended else "")
                + (f" after={r.after_time:.2f}s" if r.after_time else "")
                + (f" reason={reason!r}" if reason else ""),
                markup=False,
            )
    print_grid(out, batch_size_table(summary))
    for line in summary_lines(summary, ascii_only=not can_encode("▁")):
        out.print(line)


def _history_of_jobs(paths: list[Path], fmt: Format) -> None:
    from zeus_run.cli._jobs import jobs_grid, write_jobs
    from zeus_run.cli._render import print_grid
    from zeus_run.jobs import expand_run_dirs, load_job

    jobs = [load_job(d) for d in expand_run_dirs(paths)]
    if fmt is Format.table:
        print_grid(out_console(), jobs_grid(jobs))
    else:
        write_jobs(jobs, fmt.value)
