"""``zeus-run exec``: run an unmodified command as an ask's trial, measured and stopped by the trial agent."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from zeus_run.cli._common import QuietOption, VerboseOption, err_console, handle_errors, setup_logging


class _Echo:
    """Passes the command's output to stdout (a pod's log) and notes each counted epoch on stderr (not with -q)."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet

    def on_output(self, line: str) -> None:
        print(line, flush=True)

    def on_epoch(self, epoch: int, metric: float, time: float, energy: float, cost: float) -> None:
        if not self.quiet:
            print(
                f"zeus-run exec: epoch {epoch}: metric {metric:.4g}, {time:.1f} s, cost {cost:.4g} J", file=sys.stderr
            )

    def on_tick(self, time: float, energy: float, cost: float) -> None:
        pass


@handle_errors
def exec_command(
    command: list[str] = typer.Argument(
        None, metavar="-- CMD...", help="The command to run (default: the spec's command as the ask filled it in)."
    ),
    job: Path | None = typer.Option(None, "--job", "-j", help="Ask this job spec (or run directory) first."),
    run_dir: Path | None = typer.Option(
        None, "--run-dir", "-d", help="The ask's run directory (default: $ZEUS_RUN_DIR)."
    ),
    token: str | None = typer.Option(None, "--token", help="The ask's token (default: $ZEUS_ASK_TOKEN)."),
    verbose: bool = VerboseOption,
    quiet: bool = QuietOption,
) -> None:
    """Run a command as an ask's trial, under the trial agent: energy measured here (NVML on this
    node's GPUs, or the labelled estimate), epochs read from the event log or the spec's regex, the
    stop rules enforced here (target, max_epochs, the ask's cost threshold), the lease renewed
    every second. Then tell: the trial is recorded and folded.

    Exit codes: 0 the trial reached the target (a model); 1 it ended without (early stop,
    max_epochs, crash; the next ask retries the recurrence); 2 usage error, or the trial failed
    because of the spec or its environment (config_error, environment_error: recorded as not observed,
    as zeus-run run exits 2); 3 the lease had expired (recorded as an infrastructure failure); 5 it
    was the recurrence's last try (max_tries) and missed the target: the recurrence is recorded as
    failed and the next ask runs the next one; 75 busy; 130 interrupted (recorded, asked again).
    With -q nothing of zeus-run's own is printed unless the trial missed the target.

    Example:

        out=$(zeus-run ask job.yaml --format env) && eval "$out" && zeus-run exec -- python train.py --batch-size "$ZEUS_BATCH_SIZE"

        zeus-run exec --job job.yaml        # ask, then run the spec's own command
    """
    from zeus_run.asktell import exit_code_of, run_ask, target_of

    setup_logging(verbose, quiet)
    target = target_of(job, run_dir, token)
    record = run_ask(target, list(command or []), _Echo(quiet))
    code = exit_code_of(record)
    if not quiet or code != 0:  # -q: a line only when the trial did not reach the target
        err_console().print(
            f"zeus-run exec: recurrence {record.recurrence} try {record.attempt}: batch size {record.batch_size} "
            f"{record.stop_reason} after {record.epochs} epoch(s), cost {record.cost:.4g} J",
            highlight=False,
        )
    raise typer.Exit(code)
