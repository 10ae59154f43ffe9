"""``zeus-run when``: the planned start of the next recurrence, for schedulers that defer on their own."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from zeus_run.cli._common import handle_errors, out_console, setup_logging


def _time(value: str | None, option: str) -> float:
    import time

    from zeus_run.contract import iso_seconds
    from zeus_run.errors import UsageError

    if value is None:
        return time.time()
    t = iso_seconds(value)
    if t is None:
        raise UsageError(f"{option} {value!r} is not an ISO-8601 time; write e.g. 2026-01-01T00:00:00Z (naive: UTC).")
    return t


@handle_errors
def when_command(
    path: Path = typer.Argument(..., metavar="JOB.yaml|RUN_DIR", help="The job spec, or its run directory."),
    fmt: str = typer.Option("text", "--format", "-f", help="text: for people; json: for machines, on stdout."),
    trigger: str | None = typer.Option(
        None, "--trigger", help="When the recurrence was triggered, ISO-8601 (default: now)."
    ),
    at: str | None = typer.Option(None, "--now", help="Answer as at this time, ISO-8601 (default: now)."),
) -> None:
    """Print when the next recurrence should start: the lowest-carbon start before its deadline, or now.

    The plan is the one `zeus-run run` follows (the job's `start` section, its forecast, its own run
    durations): `start_at`, the forecast now and at the start, the duration planned for, the deadline,
    where the forecast came from and why. For schedulers that defer on their own (an Airflow sensor,
    a Kubernetes CronJob that re-schedules): wait until `start_at`, then `zeus-run run --next`.

    Example:

        zeus-run when job.yaml

        zeus-run when runs/nightly --format json

        zeus-run when runs/nightly --trigger 2026-01-05T00:00:00Z --format json

    Exit codes: 0 a plan (status wait, start or late), 1 the deadline has already passed (status missed),
    2 spec or usage error (no start section, an unreadable forecast).
    """
    from zeus_run.door.start import job_of, plan_trigger, status
    from zeus_run.errors import UsageError
    from zeus_run.start import clock

    setup_logging()
    if fmt not in ("text", "json"):
        raise UsageError(f"--format {fmt!r}: use text or json.")
    now = _time(at, "--now")
    triggered = _time(trigger, "--trigger") if trigger is not None else now
    if triggered > now + 1:
        raise UsageError(f"--trigger {trigger!r} is after --now: a plan is made at or after its trigger.")
    spec, _, records = job_of(path)
    p = plan_trigger(spec, records, triggered)
    state, words = status(p, now)
    if fmt == "json":
        typer.echo(
            json.dumps(
                {**p.to_dict(), "status": state, "message": words, "wait_s": max(0.0, round(p.start_at - now, 1))}
            )
        )
    else:
        out = out_console()
        dur = "unknown (too little history)" if p.duration is None else _span(p.duration)
        fc = (
            "none"
            if p.forecast_now is None
            else f"now {p.forecast_now:.0f} g/kWh, at the start {p.forecast_at_start:.0f} g/kWh"
        )
        for line in (
            f"start_at: {clock(p.start_at)} ({_iso(p.start_at)}): {words}",
            f"deadline: {clock(p.deadline)} ({_iso(p.deadline)})",
            f"planned duration: {dur}",
            f"forecast: {fc} ({p.provenance})",
            f"why: {p.reason}",
        ):
            out.print(line, markup=False, highlight=False)
    if state == "missed":
        from zeus_run.cli._common import fail

        raise fail(words[0].upper() + words[1:] + ".", 1)


def _span(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def _iso(t: float) -> str:
    from zeus_run.start import iso

    return iso(t)
