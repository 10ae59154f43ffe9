"""``zeus-run run``: run or resume a recurring job."""

from __future__ import annotations

from pathlib import Path

import typer

from zeus_run.cli._common import (
    QuietOption,
    VerboseOption,
    err_console,
    handle_errors,
    out_console,
    setup_logging,
)


@handle_errors
def run_command(
    spec_path: Path = typer.Argument(..., metavar="JOB.yaml", help="The job spec (YAML)."),
    run_dir: Path | None = typer.Option(
        None, "--run-dir", "-d", help="Run directory (default: the spec's run_dir, runs/<name>)."
    ),
    recurrences: int | None = typer.Option(None, "--recurrences", "-n", min=1, help="Override the spec's recurrences."),
    next_k: int | None = typer.Option(
        None,
        "--next",
        min=1,
        metavar="[K]",
        help="Run the next K recurrences (default 1) past those already done: one scheduler trigger (cron). "
        "If another launcher holds the run directory: exit 75 at once, or, with concurrency > 1, join it "
        "(it runs them in its free slots).",
    ),
    new: bool = typer.Option(
        False, "--new", help="Start a fresh run directory even if this one has history (the old one is kept)."
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="If the spec changed in a way that invalidates the history, start a fresh run directory instead of refusing.",
    ),
    no_output: bool = typer.Option(
        False, "--no-output", help="Do not echo the training script's output (it is still logged per trial)."
    ),
    verbose: bool = VerboseOption,
    quiet: bool = QuietOption,
) -> None:
    """Run a recurring training job, choosing each recurrence's batch size with Zeus.

    Re-running the same command on the same run directory resumes where it stopped.
    On a terminal a status line shows the recurrence N/M, the elapsed time and
    an ETA; elsewhere (cron, CI, Slurm) each trial's start and end is one plain
    line with the same figures. -q prints only warnings and errors (a crashed
    trial is a warning); -v adds debug lines such as each trial's command.

    Example:

        zeus-run configs/demo.yaml

        zeus-run run job.yaml --run-dir runs/nightly -n 50

        zeus-run run job.yaml --next    # one recurrence per cron trigger

    Exit codes: 0 done, 1 every try failed, 2 spec or usage error, 75 run
    directory busy (another launcher holds it and concurrency is 1; nothing
    was run), 128+N signal N.
    """
    from zeus_run.accounting import account
    from zeus_run.cli._live import make_run_view
    from zeus_run.cli._render import batch_size_table, can_encode, history_table, print_grid, summary_lines
    from zeus_run.engine.runner import run_job
    from zeus_run.errors import UsageError
    from zeus_run.rundir.store import SPEC_NAME
    from zeus_run.spec import load_spec
    from zeus_run.views.recommend import believed_best
    from zeus_run.views.summary import summarize

    setup_logging(verbose, quiet)
    spec = load_spec(spec_path)
    if recurrences is not None:
        spec = spec.with_overrides(recurrences=recurrences)
    if recurrences is not None and next_k is not None:
        raise UsageError("-n/--recurrences and --next both say how many recurrences to run; pass only one.")
    if new and force:
        raise UsageError("--new and --force both start a fresh run directory; pass only one.")
    err = err_console()
    with make_run_view(err, show_output=not no_output, quiet=quiet) as view:
        result = run_job(spec, run_dir=run_dir, listener=view, new=new, force=force, next_recurrences=next_k)
    if quiet:
        return
    records = result.records
    summary = summarize(records, spec.default_batch_size, belief=believed_best(records, result.run_dir))
    out = out_console()
    print_grid(out, history_table(records, f"{spec.name}: {len(records)} trial(s) in {result.run_dir}"))
    print_grid(out, batch_size_table(summary))
    for line in summary_lines(summary, ascii_only=not can_encode("▁")):
        out.print(line)
    money = account(records, spec.accounting, spec.default_batch_size, spec.source.parent if spec.source else None)
    for line in money.lines() if money else ():
        out.print(line, markup=False)
    err.print(f"History: {result.run_dir / 'history.jsonl'}   resolved spec: {result.run_dir / SPEC_NAME}")
