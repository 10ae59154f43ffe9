"""``zeus-run cancel``: release an ask that will never be told."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from zeus_run.cli._common import QuietOption, VerboseOption, handle_errors, setup_logging
from zeus_run.cli.tell import RunDirArgument, TokenArgument


@handle_errors
def cancel_command(
    run_dir: Path = RunDirArgument,
    token: str = TokenArgument,
    reason: str | None = typer.Option(None, "--reason", "-m", help="Why, for the record (e.g. 'pod evicted')."),
    as_json: bool = typer.Option(False, "--json", help="Print the record as JSON on stdout."),
    verbose: bool = VerboseOption,
    quiet: bool = QuietOption,
) -> None:
    """Release an ask that will never be told (its answer was lost, its pod is gone): it is recorded at
    once as an infrastructure failure, as an expired lease is, not fed to the optimizer, and its
    recurrence goes to the next ask. Without this it holds its place (`concurrency`, and `run`)
    until its lease ends. `zeus-run history RUN_DIR` lists the asks in flight with their tokens.
    The server's equivalent is DELETE /v1/jobs/JOB/trials/TOKEN.

    Exit codes: 0 released; 2 usage error, unknown token, or already told (or expired, or
    cancelled); 75 busy (a `zeus-run run` launcher holds the run directory).

    Example:

        zeus-run cancel runs/nightly 6f1c0a... --reason "pod evicted"
    """
    from zeus_run.asktell import cancel

    setup_logging(verbose, quiet)
    record = cancel(run_dir, token, reason=reason)
    if as_json:
        print(json.dumps(record.to_json()))
    else:
        print(
            f"released recurrence {record.recurrence} try {record.attempt} (batch size {record.batch_size}): "
            "recorded as infrastructure; the next ask runs its recurrence again"
        )
