"""``run``'s wait for a planned start (the job's ``start`` section): a live line, and a clean stop on SIGTERM or Ctrl-C.

The wait happens before the job is opened: a stop while waiting ends the command with no trial started and
nothing written but the plan's record (``starts.jsonl``: the plan, then ``interrupted``); the next trigger
plans again.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from zeus_run.spec import JobSpec
    from zeus_run.start import Plan

#: Seconds between live-line updates on a terminal, and between plain lines elsewhere (cron, Slurm logs).
TICK_TTY = 1.0
TICK_PLAIN = 600.0


def wait_for_start(spec: JobSpec, run_dir: Path, err: Console, quiet: bool = False) -> Plan:
    """Plan this trigger, record the plan, and wait until its start.

    Raises:
        typer.Exit: 128+N after signal N (SIGTERM, SIGINT) while waiting: no trial started.
    """
    from zeus_run.door.start import job_of_dir, plan_trigger, record_plan, sources
    from zeus_run.start import clock

    records = job_of_dir(run_dir)
    p = plan_trigger(spec, records, time.time())
    record_plan(run_dir, p)
    if not quiet:
        err.print(f"Start plan: {p.line()}", markup=False, highlight=False)
    if not p.moved or p.start_at <= time.time():
        return p
    if spec.executor.kind == "slurm":  # Slurm holds the job (sbatch --begin, `with_begin`): no process waits
        if not quiet:
            err.print(f"Submitting with --begin={_begin(p)} (Slurm holds it until then)", markup=False, highlight=False)
        return p
    actual = sources(spec).actual
    stop = threading.Event()
    got: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        got.append(signum)
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        tty = err.is_terminal
        while not stop.is_set():
            now = time.time()
            left = p.start_at - now
            if left <= 0:
                break
            if not quiet:
                current = float(actual.at(now)) if actual is not None else p.forecast_now
                now_text = f", now {current:.0f}" if current is not None else ""
                line = (
                    f"waiting until {clock(p.start_at)} for {p.forecast_at_start:.0f} g/kWh{now_text}; due "
                    f"{clock(p.deadline)}"
                )
                if tty:
                    err.file.write("\r" + line + " " * 4)
                    err.file.flush()
                else:
                    err.print(line, markup=False, highlight=False)
            stop.wait(min(left, TICK_TTY if tty else TICK_PLAIN))
        if tty and not quiet:
            err.file.write("\n")
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if got:
        signum = got[0]
        record_plan(run_dir, p, event="interrupted", signal=signal.Signals(signum).name, at=_now())
        err.print(
            f"Stopped by {signal.Signals(signum).name} while waiting to start at {clock(p.start_at)}: no trial "
            "started, nothing lost; the next trigger plans again.",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(128 + signum)
    return p


def with_begin(spec: JobSpec, p: Plan) -> JobSpec:
    """``spec`` whose Slurm trials are submitted with ``--begin`` at the plan's start (a moved plan, a Slurm
    executor); otherwise ``spec`` itself. A try submitted after that time (a retry) starts at once."""
    import dataclasses

    if spec.executor.kind != "slurm":
        return spec
    args = tuple(a for a in spec.executor.extra_args if not a.startswith("--begin"))  # a stored spec's earlier one
    if p.moved:
        args = (*args, f"--begin={_begin(p)}")
    if args == spec.executor.extra_args:
        return spec
    return dataclasses.replace(spec, executor=dataclasses.replace(spec.executor, extra_args=args))


def _begin(p: Plan) -> str:
    """The plan's start as sbatch's ``--begin`` reads it: ``now+SECONDS`` (relative, so no time zone is assumed)."""
    return f"now+{max(0, round(p.start_at - time.time()))}"


def _now() -> str:
    from zeus_run.start import iso

    return iso(time.time())
