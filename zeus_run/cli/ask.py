"""``zeus-run ask``: reserve the next trial of a job that someone else launches, and print the decision."""

from __future__ import annotations

import enum
import json
import re
import shlex
from pathlib import Path

import typer

from zeus_run.cli._common import (
    IdempotencyKeyOption,
    QuietOption,
    VerboseOption,
    err_console,
    handle_errors,
    setup_logging,
)


class AskFormat(str, enum.Enum):
    """``zeus-run ask --format``."""

    text = "text"
    json = "json"
    env = "env"


#: A name a POSIX shell can ``export``.
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@handle_errors
def ask_command(
    job: Path = typer.Argument(..., metavar="JOB", help="The job spec (YAML), or a run directory that has one."),
    run_dir: Path | None = typer.Option(
        None, "--run-dir", "-d", help="Run directory (default: the spec's run_dir, runs/<name>)."
    ),
    fmt: AskFormat = typer.Option(
        AskFormat.text,
        "--format",
        "-f",
        case_sensitive=False,
        help="text (for people), json (one object), or env (`export` lines for `eval` in a shell step).",
    ),
    idempotency_key: str | None = IdempotencyKeyOption,
    verbose: bool = VerboseOption,
    quiet: bool = QuietOption,
) -> None:
    """Reserve the next trial and print the decision: batch size, learning rate, seed, recurrence and
    try, the token, the trial directory, the cost threshold, max_epochs, the command and the
    environment the zeus_run.train helper reads.

    The trial then runs wherever the orchestrator puts it: under `zeus-run exec -- CMD...` (measured
    and stopped by the trial agent), or with zeus_run.train.Trial / a callback, closed by
    `zeus-run tell RUN_DIR TOKEN`. An ask that is neither told nor renewed (heartbeat) within the
    spec's `lease` (default 600 s) is recorded as an infrastructure failure and asked again.

    The json format's `workdir` is the absolute directory the command runs in (its relative paths
    start there).

    With a `start` section in the spec the answer also says when to start, planned as `zeus-run when`
    plans (the ask's time as the trigger): json `start` {start_at, start_in_s, deadline, moved,
    reason, status, trigger}; env ZEUS_START_AT, ZEUS_START_IN_S, ZEUS_START_DEADLINE,
    ZEUS_START_REASON. The trial is reserved at once and its lease runs: to wait, call `zeus-run
    when` before asking, or keep the lease with `zeus-run heartbeat` while waiting.

    Exit codes: 0 asked; 2 spec or usage error; 4 the job is done (every one of the spec's
    `recurrences` has run; `recurrences: null` never ends); 75 busy (a `zeus-run run` launcher
    holds the run directory, or `concurrency` asks are in flight; nothing was asked).

    Example:

        out=$(zeus-run ask job.yaml --format env) && eval "$out" && zeus-run exec -- python train.py --bs "$ZEUS_BATCH_SIZE"

        zeus-run ask runs/nightly --format json

        zeus-run ask runs/nightly --format env --idempotency-key "$PIPELINE_RUN_ID"   # safe to retry
    """
    from zeus_run.asktell import ask

    setup_logging(verbose, quiet)
    a = ask(job, run_dir=run_dir, key=idempotency_key)
    start = _start(a.run_dir)
    if fmt is AskFormat.json:
        print(json.dumps({**a.to_json(), **({"start": start} if start is not None else {})}, indent=1))
    elif fmt is AskFormat.env:
        print(env_lines({**a.env, **start_env(start)}, shlex.join(a.command)))
    else:
        threshold = "none" if a.cost_threshold is None else f"{a.cost_threshold:.4g} J"
        lr = "none" if a.learning_rate is None else f"{a.learning_rate:g}"
        print(
            "\n".join(
                [
                    f"recurrence {a.recurrence}, try {a.attempt} (trial #{a.trial}): batch size {a.batch_size} "
                    f"({a.stage}: {a.detail})",
                    f"learning rate {lr}, seed {a.seed}, max_epochs {a.max_epochs}, cost threshold {threshold}",
                    f"token {a.token}",
                    f"run dir {a.run_dir}",
                    f"trial dir {a.trial_dir}",
                    f"command {shlex.join(a.command)}",
                    f"workdir {a.workdir}  (run the command here)",
                    f"lease {a.lease_s:g} s (renewed by the trial's heartbeat)",
                    f"tell: zeus-run tell {shlex.quote(str(a.run_dir))} {a.token} --exit-code N",
                    *(
                        [f"start at {start['start_at']} (in {start['start_in_s']:g} s): {start['reason']}"]
                        if start
                        else []
                    ),
                ]
            )
        )
    err_console().print(
        f"asked recurrence {a.recurrence} try {a.attempt}: batch size {a.batch_size}; token {a.token}", highlight=False
    )


def _start(run_dir: Path) -> dict[str, object] | None:
    """The planned start of this ask (`zeus_run.door.start.ask_start`), for a job with a ``start`` section."""
    import time

    from zeus_run.door.start import ask_start
    from zeus_run.rundir.opener import stored_spec

    return ask_start(stored_spec(run_dir), run_dir, time.time())


def start_env(start: dict[str, object] | None) -> dict[str, str]:
    """``ZEUS_START_AT``, ``ZEUS_START_IN_S``, ``ZEUS_START_DEADLINE`` and ``ZEUS_START_REASON`` (none: empty)."""
    if start is None:
        return {}
    return {
        "ZEUS_START_AT": str(start["start_at"]),
        "ZEUS_START_IN_S": f"{start['start_in_s']:g}",
        "ZEUS_START_DEADLINE": str(start["deadline"] or ""),
        "ZEUS_START_REASON": str(start["reason"]),
    }


def env_lines(env: dict[str, str], command: str) -> str:
    """``export NAME='value'`` lines, each value quoted for a POSIX shell (safe to ``eval``)."""
    items = {**env, "ZEUS_COMMAND": command}
    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in items.items() if _SHELL_NAME.fullmatch(k))
