"""``zeus-run report``: one self-contained HTML file to share a run."""

from __future__ import annotations

from pathlib import Path

import typer

from zeus_run.cli._common import err_console, handle_errors, setup_logging


@handle_errors
def report_command(
    path: Path = typer.Argument(..., metavar="RUN_DIR", help="A run directory (e.g. runs/demo)."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="HTML file to write (default: RUN_DIR/report.html)."
    ),
) -> None:
    """Write a self-contained HTML report of a run: summary, per-batch-size table, plots and the decision audit.

    The file has no external scripts, fonts or images (the plots are embedded),
    so it can be mailed or attached to a ticket. Needs matplotlib for the plots:
    pip install 'zeus-run[plot]'.

    Example:

        zeus-run report runs/demo -o report.html
    """
    from zeus_run.cli._common import run_dir_history
    from zeus_run.views.report import write_report

    setup_logging()
    run_dir = run_dir_history(path).parent
    out = write_report(run_dir, output or run_dir / "report.html")
    err_console().print(f"Report written to {out}", markup=False)
