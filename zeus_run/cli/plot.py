"""``zeus-run plot``: a picture of a run (needs the optional extra ``zeus-run[plot]``)."""

from __future__ import annotations

from pathlib import Path

import typer

from zeus_run.cli._common import err_console, handle_errors, run_dir_history, setup_logging
from zeus_run.views.jobs import many_jobs


@handle_errors
def plot_command(
    paths: list[Path] = typer.Argument(
        ...,
        metavar="RUN_DIR...",
        help="A run directory (e.g. runs/demo) or its history.jsonl; several, or a folder of them: the savings of all jobs.",
    ),
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="Image to write: .png, .svg or .pdf (default: RUN_DIR/plot.png; several jobs: savings.png).",
    ),
) -> None:
    """Draw a run into an image: cost per recurrence against the default batch size's, batch size and power limit over time, and each batch size's cost distribution.

    With several run directories (or a folder of them) it draws the savings of
    all jobs on one figure instead: each job's saving so far after every
    recurrence, and each job's saving of cost, energy and time.

    Works for real runs and for the run directories that `zeus-run simulate
    --run-dir` writes. Needs matplotlib: pip install 'zeus-run[plot]'.

    Example:

        zeus-run plot runs/demo

        zeus-run plot runs/sim/cifar100-a40-zeus-seed1 -o cifar100.png

        zeus-run plot runs/* -o savings.png   # the savings of all jobs on one figure
    """
    from zeus_run.rundir.history import read_history
    from zeus_run.rundir.settings import RunSettings
    from zeus_run.views.jobs import accounting_of, knobs_of, summarize_run
    from zeus_run.views.plot import load_matplotlib, plot_history

    setup_logging()
    if many_jobs(paths):
        from zeus_run.views.jobs import expand_run_dirs, load_job
        from zeus_run.views.plot_jobs import plot_jobs

        load_matplotlib()
        jobs = [load_job(d) for d in expand_run_dirs(paths)]
        err_console().print(f"Plot written to {plot_jobs(jobs, output or Path('savings.png'))}", markup=False)
        return
    hist = run_dir_history(paths[0])
    load_matplotlib()  # a missing extra is reported before the history is read
    records = read_history(hist)
    settings = RunSettings.read(hist.parent)  # spec.yaml, read once
    b0 = settings.default_batch_size
    summary = summarize_run(records, knobs_of(hist.parent, settings), b0, hist.parent)
    money = accounting_of(hist.parent, records, summary, settings)
    out = plot_history(
        records, output or hist.parent / "plot.png", default_batch_size=b0, accounting=money, summary=summary
    )
    err_console().print(f"Plot written to {out}", markup=False)
