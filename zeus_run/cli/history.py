"""``zeus-run history``: the recurrence table and summary of a run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from zeus_run.cli._common import Format, FormatOption, handle_errors, out_console, run_dir_history, setup_logging
from zeus_run.views.jobs import many_jobs

if TYPE_CHECKING:
    from zeus_run.engine.measure import PowerBasis
    from zeus_run.records import TrialRecord
    from zeus_run.rundir.settings import RunSettings


def expired_now(run_dir: Path, settings: RunSettings, records: list[TrialRecord]) -> list[TrialRecord]:
    """The asks whose lease ran out, as the records their expiry will append (shown, not written: a read-only
    command stays read-only; the next ask, tell or launcher records them)."""
    import time

    from zeus_run.door.lease import expired_asks
    from zeus_run.spec import DEFAULT_LEASE

    lease = settings.lease if settings.lease is not None else DEFAULT_LEASE
    job = records[0].job if records else str((settings.raw or {}).get("name") or run_dir.name)
    return expired_asks(run_dir, job, lease, time.time(), _charge(run_dir, records))


def _charge(run_dir: Path, records: list[TrialRecord]) -> tuple[PowerBasis, float, float] | None:
    """What an expired ask is charged from (the job's measured power, ``energy.watts``, ``eta``), as its expiry
    will charge it; None where the run directory's spec cannot be read."""
    from zeus_run.engine.measure import PowerBasis
    from zeus_run.errors import ZeusRunError
    from zeus_run.rundir.opener import stored_spec as spec_of

    try:
        spec = spec_of(run_dir)
    except (ZeusRunError, OSError):
        return None
    return PowerBasis.of(records), spec.energy.watts, spec.eta


def profile_lines(run_dir: Path) -> list[str]:
    """The run's power-limit profiles: per limit, power, throughput, window duration and counter updates."""
    from zeus_run.power import PROFILES_NAME, ProfileStore

    if not (run_dir / PROFILES_NAME).is_file():
        return []
    lines = []
    store = ProfileStore(run_dir)
    by_model = store.by_model
    for model, bs, profile in sorted((m, bs, p) for m, profiles in by_model.items() for bs, p in profiles.items()):
        cells = []
        for m in profile:
            window = (
                f", {m.window_s:.1f} s window, {m.samples} counter updates"
                if m.window_s is not None and m.samples is not None
                else ""
            )
            cells.append(f"{m.power_limit:g} W: {m.avg_power:.1f} W, {m.throughput:.3g} it/s{window}")
        partial = " (partial: the next trial continues it)" if bs in store.partial_by_model.get(model, set()) else ""
        lines.append(f"Power profile of batch size {bs} on {model}{partial}: " + "; ".join(cells))
    return lines


@handle_errors
def history_command(
    paths: list[Path] = typer.Argument(
        ...,
        metavar="RUN_DIR...",
        help="A run directory (e.g. runs/demo) or its history.jsonl; several, or a folder of them (runs/*, runs): one line per job.",
    ),
    fmt: Format = FormatOption,
    trials: bool = typer.Option(False, "--trials", help="With --format table: also list every trial."),
) -> None:
    """Show a run's recurrences, per-batch-size statistics, the savings and a recommended setting.

    With several run directories (or a folder of them): one line per job
    (recurrences, last run and its outcome, current batch size and power
    limit, whether exploration is over, energy, time, cost, the saving against
    the default and the steady state), then a total line.

    The table has one row per recurrence (a failed try shows its cause, e.g.
    `crashed (RuntimeError: CUDA out of memory)`). Below it: per batch size,
    trials, converged runs, mean and std of cost, epochs, time and energy; a
    sparkline of cost per recurrence; whether exploration is still going; the
    default batch size's mean and how many runs it rests on; the steady state
    (the last recurrences after exploration against the default); and the
    recommended batch size, learning rate and power limit; with an `accounting`
    section in the spec, the carbon (g CO2e, with a prefix) and money next to the default's.

    Example:

        zeus-run history runs/demo

        zeus-run history runs/demo --format csv > demo.csv

        zeus-run history runs/*   # one line per job, then a total
    """
    from zeus_run.cli._render import (
        batch_size_table,
        can_encode,
        history_table,
        print_grid,
        summary_lines,
        write_records,
    )
    from zeus_run.rundir.history import read_history
    from zeus_run.views.in_flight import in_flight_lines
    from zeus_run.views.jobs import accounting_of, knobs_of, summarize_run
    from zeus_run.views.rows import failure_reason
    from zeus_run.views.story import story_lines

    setup_logging()
    if many_jobs(paths):
        _history_of_jobs(paths, fmt)
        return
    from zeus_run.rundir.settings import RunSettings

    if fmt is Format.table and _nothing_recorded_yet(paths[0]):
        return
    hist = run_dir_history(paths[0])
    settings = RunSettings.read(hist.parent)  # spec.yaml, read once
    records = list(read_history(hist))
    records += expired_now(hist.parent, settings, records)  # shown, not written: history only reads
    summary = summarize_run(records, knobs_of(hist.parent, settings), settings.default_batch_size, hist.parent)
    money = accounting_of(hist.parent, records, summary, settings)
    if fmt is not Format.table:
        write_records(records, fmt.value, summary, money)
        return
    out = out_console()
    print_grid(out, history_table(records, f"{len(records)} trial(s) in {hist}"))
    if trials:
        for r in records:
            reason = failure_reason(r)
            out.print(
                f"  #{r.trial} rec {r.recurrence} try {r.attempt} bs={r.batch_size} {r.stop_reason} epochs={r.epochs} "
                f"cost={r.cost:.1f} J metrics={list(r.metrics)}"
                + (f" exit={r.exit_code} ended={r.ended}" if r.ended else "")
                + (f" after={r.after_time:.2f}s" if r.after_time else "")
                + (
                    f" ~estimated={r.estimated_energy:.0f}J({r.estimated_share or 0:.0%})"
                    if r.estimated_energy is not None
                    else ""
                )
                + (f" reason={reason!r}" if reason else ""),
                markup=False,
            )
    print_grid(out, batch_size_table(summary))
    for line in summary_lines(summary, ascii_only=not can_encode("▁")):
        out.print(line)
    for line in money.lines() if money else ():
        out.print(line, markup=False)
    for line in profile_lines(hist.parent):
        out.print(line, markup=False)
    for line in in_flight_lines(hist.parent, settings=settings):
        out.print(line, markup=False)
    for line in story_lines(hist.parent, records):  # a warm start, why it did not explore, a launcher's trials
        out.print(line, markup=False)
    from zeus_run.door.start import start_lines

    for line in start_lines(hist.parent):  # the start plans (spec section start) and what they saved
        out.print(line, markup=False, highlight=False)


def _nothing_recorded_yet(path: Path) -> bool:
    """For a run directory with no history yet: say so, list its asks in flight, and return True."""
    from zeus_run.rundir.history import HISTORY_NAME
    from zeus_run.rundir.store import SPEC_NAME
    from zeus_run.views.in_flight import in_flight_lines

    if not path.is_dir() or (path / HISTORY_NAME).exists() or not (path / SPEC_NAME).is_file():
        return False
    out = out_console()
    out.print(f"No trial recorded yet in {path}.", markup=False)
    from zeus_run.views.story import story_lines

    story = story_lines(path, [])
    for line in in_flight_lines(path) or ([] if story else ["No ask in flight either."]):
        out.print(line, markup=False)
    for line in story:  # a warm start, the first trial in flight (or orphaned)
        out.print(line, markup=False)
    return True


def _history_of_jobs(paths: list[Path], fmt: Format) -> None:
    from zeus_run.cli._jobs import jobs_grid, write_jobs
    from zeus_run.cli._render import print_grid
    from zeus_run.views.jobs import expand_run_dirs, load_job

    jobs = [load_job(d) for d in expand_run_dirs(paths)]
    if fmt is Format.table:
        print_grid(out_console(), jobs_grid(jobs))
    else:
        write_jobs(jobs, fmt.value)
