"""``zeus-run run``: run or resume a recurring job."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from zeus_run.cli._common import (
    QuietOption,
    VerboseOption,
    err_console,
    handle_errors,
    out_console,
    setup_logging,
)

if TYPE_CHECKING:
    from rich.console import Console

    from zeus_run.records import TrialRecord


@handle_errors
def run_command(
    spec_path: Path = typer.Argument(
        ...,
        metavar="JOB.yaml|RUN_DIR",
        help="The job spec (YAML), or a run directory: it runs with its spec.yaml, the spec in force.",
    ),
    run_dir: Path | None = typer.Option(
        None, "--run-dir", "-d", help="Run directory (default: the spec's run_dir, runs/<name>)."
    ),
    recurrences: int | None = typer.Option(
        None,
        "--recurrences",
        "-n",
        min=1,
        help="Run until N recurrences have ended in all (this run only: the optimizer still plans over the "
        "spec's `recurrences`, or its `lifetime` when open-ended).",
    ),
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
    warm_from: Path | None = typer.Option(
        None,
        "--warm-from",
        metavar="RUN_DIR",
        help="Start warm from this job's run directory elsewhere (another GPU or cluster, or from before a spec "
        "change): its epochs to the target seed the optimizer; pace and power are measured here. Sets "
        "optimizer.warm_from; the run directory keeps a copy of its history.",
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

        zeus-run run runs/job --next    # the same, with the run directory's spec.yaml (the spec in force)

        zeus-run run job-a100.yaml --warm-from runs/job-v100    # start from what the V100 runs learnt

    A recurrence whose every try (max_tries) missed the target is recorded as
    failed, and the job goes on with the next recurrence (now, or at the next
    trigger).

    Exit codes: 0 done, 1 the job cannot reach its target (its first
    recurrence failed at the default batch size), 2 spec or usage error, 5 a
    recurrence failed (recorded; the next trigger runs the next recurrence), 75
    run directory busy (another launcher holds it and concurrency is 1;
    nothing was run), 128+N signal N.
    """
    from zeus_run.cli._live import make_run_view
    from zeus_run.errors import RECURRENCE_FAILED_EXIT_CODE, UsageError
    from zeus_run.launcher import run_job
    from zeus_run.rundir.settings import read_once
    from zeus_run.rundir.store import SPEC_NAME
    from zeus_run.spec import load_spec

    setup_logging(verbose, quiet)
    if spec_path.is_dir():  # a run directory: its own spec.yaml, and itself as the run directory
        from zeus_run.rundir.opener import stored_spec

        spec = stored_spec(spec_path)
        run_dir = run_dir if run_dir is not None else spec_path
    else:
        spec = load_spec(spec_path)
    if warm_from is not None:
        spec = spec.with_warm_start(warm_from)
    if recurrences is not None and next_k is not None:
        raise UsageError("-n/--recurrences and --next both say how many recurrences to run; pass only one.")
    if new and force:
        raise UsageError("--new and --force both start a fresh run directory; pass only one.")
    start_plan = None
    if spec.start.enabled:  # the job's start section: wait for the cleanest start before the deadline
        from zeus_run.cli._wait import wait_for_start, with_begin

        start_plan = wait_for_start(spec, run_dir if run_dir is not None else spec.run_dir, err_console(), quiet)
        spec = with_begin(spec, start_plan)  # Slurm: sbatch --begin instead of a waiting process
    # One trigger: its run directory's spec.yaml is read once, the summary's reads included.
    with read_once():
        err = None if quiet else err_console()  # -q (cron): no console, and nothing of rich loaded
        with make_run_view(err, show_output=not no_output, quiet=quiet) as view:
            result = run_job(
                spec, run_dir=run_dir, listener=view, new=new, force=force, next_recurrences=next_k, until=recurrences
            )
        if start_plan is not None:
            from zeus_run.door.start import record_outcome, sources

            record_outcome(result.run_dir, start_plan, result.new, sources(spec).actual)
        if err is not None:
            from zeus_run.cli._render import history_table, print_grid

            records = result.records
            out = out_console()
            print_grid(out, history_table(records, f"{spec.name}: {len(records)} trial(s) in {result.run_dir}"))
            print_run_summary(out, records, result.run_dir, spec.default_batch_size)
            err.print(f"History: {result.run_dir / 'history.jsonl'}   resolved spec: {result.run_dir / SPEC_NAME}")
    if result.failed:
        err = err or err_console()
        for r in result.failed:
            err.print(
                f"Recurrence {r.recurrence} failed: {r.recurrence_failed}. It is recorded as failed and the job "
                f"goes on with the next recurrence (exit code {RECURRENCE_FAILED_EXIT_CODE}).",
                markup=False,
                highlight=False,
            )
        raise typer.Exit(RECURRENCE_FAILED_EXIT_CODE)


def print_run_summary(out: Console, records: Sequence[TrialRecord], run_dir: Path, default_batch_size: int) -> None:
    """The summary under ``run``'s table: per batch size, the savings (`zeus_run.views.jobs.summarize_run`), carbon."""
    from zeus_run.cli._render import batch_size_table, can_encode, print_grid, summary_lines
    from zeus_run.views.jobs import accounting_of, knobs_of, summarize_run

    summary = summarize_run(records, knobs_of(run_dir), default_batch_size, run_dir)
    print_grid(out, batch_size_table(summary))
    for line in summary_lines(summary, ascii_only=not can_encode("▁")):
        out.print(line)
    money = accounting_of(run_dir, records, summary)
    for line in money.lines() if money else ():
        out.print(line, markup=False)
