"""``zeus-run tell`` and ``zeus-run heartbeat``: close an ask's trial, or renew its lease."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from zeus_run.cli._common import IdempotencyKeyOption, QuietOption, VerboseOption, handle_errors, setup_logging

RunDirArgument = typer.Argument(..., metavar="RUN_DIR", help="The run directory the ask named (ZEUS_RUN_DIR).")
TokenArgument = typer.Argument(..., metavar="TOKEN", help="The ask's token (ZEUS_ASK_TOKEN).")


@handle_errors
def tell_command(
    run_dir: Path = RunDirArgument,
    token: str = TokenArgument,
    exit_code: int | None = typer.Option(
        None, "--exit-code", help="The training script's exit code (non-zero: crashed)."
    ),
    energy: float | None = typer.Option(
        None, "--energy", min=0.0, help="Energy the trial used (J), when nothing measured it; recorded as reported."
    ),
    time: float | None = typer.Option(
        None, "--time", min=0.0, help="Time the trial ran (s), when nothing measured it; recorded as reported."
    ),
    message: str | None = typer.Option(None, "--message", "-m", help="A note for the record (e.g. why it failed)."),
    metric: list[float] | None = typer.Option(
        None,
        "--metric",
        help="The validation metric of one epoch; repeat it, in epoch order, once per epoch (for a script "
        "that reported no epochs itself, e.g. a shell loop).",
    ),
    log: Path | None = typer.Option(
        None,
        "--log",
        help="The script's output (a file). When it failed, its tail is recorded, and an environment error "
        "(ModuleNotFoundError, a missing command) is told apart from a crash of the batch size.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the record as JSON on stdout."),
    idempotency_key: str | None = IdempotencyKeyOption,
    verbose: bool = VerboseOption,
    quiet: bool = QuietOption,
) -> None:
    """Close an ask's trial: record it from the events it wrote into its directory (or from the
    agent's outcome under `zeus-run exec`), with --energy/--time when nothing measured them
    (marked in the record as reported, not measured), and fold it into the history.

    Exit codes: 0 recorded (a spec or environment error too: it is recorded as not observed, and
    the error says what to fix); 2 usage error, unknown token, or already told; 3 too late: the lease
    had expired, the trial is recorded as an infrastructure failure and this tell is refused
    (what it reported is kept in the trial directory as late_tell.json); 75 busy.

    Example:

        zeus-run tell runs/nightly 6f1c0a... --exit-code 0 --energy 5.2e6 --time 3600

        zeus-run tell "$ZEUS_RUN_DIR" "$ZEUS_ASK_TOKEN" --exit-code $? --idempotency-key "$ZEUS_ASK_TOKEN"

        zeus-run tell "$ZEUS_RUN_DIR" "$ZEUS_ASK_TOKEN" --exit-code 0 --metric 0.71 --metric 0.83 --metric 0.91

        python train.py 2>&1 | tee train.log; zeus-run tell "$ZEUS_RUN_DIR" "$ZEUS_ASK_TOKEN" --exit-code ${PIPESTATUS[0]} --log train.log
    """
    from zeus_run.asktell import report_epoch, tell

    setup_logging(verbose, quiet)
    for epoch, value in enumerate(metric or (), start=1):
        report_epoch(run_dir, token, epoch, value)  # the per-epoch path `zeus_run.train` reports through
    record = tell(
        run_dir, token, exit_code=exit_code, energy=energy, time=time, message=message, key=idempotency_key, log=log
    )
    if as_json:
        print(json.dumps(record.to_json()))
    else:
        print(
            f"recorded recurrence {record.recurrence} try {record.attempt}: batch size {record.batch_size} "
            f"{record.stop_reason} after {record.epochs} epoch(s), cost {record.cost:.4g} J"
            + (f" ({record.reported} reported)" if record.reported else "")
        )


@handle_errors
def heartbeat_command(run_dir: Path = RunDirArgument, token: str = TokenArgument) -> None:
    """Renew an ask's lease (for a trial that neither runs under `zeus-run exec` nor uses
    zeus_run.train.Trial, which renew it themselves). Prints when the lease now runs out.

    Exit codes: 0 renewed; 2 unknown token or already told; 3 the lease had already expired.

    Example:

        while sleep 60; do zeus-run heartbeat "$ZEUS_RUN_DIR" "$ZEUS_ASK_TOKEN" || break; done &
    """
    import datetime

    from zeus_run.asktell import heartbeat

    until = heartbeat(run_dir, token)
    print(
        f"lease renewed until {datetime.datetime.fromtimestamp(until, datetime.timezone.utc).isoformat(timespec='seconds')}"
    )
