"""Opening a job, for every door: find its run directory (`locate`), lock it and settle what it holds (`open_job`).

``zeus-run run`` (and ``--next``), ``ask``, ``tell``, ``heartbeat``, ``exec``, the Python `Job`, the callbacks
and the server all open a job here, so that each finds the same directory and sees the same history:

* `locate`: a job spec (a file or a parsed `JobSpec`) names its ``run_dir`` (or the one given), checked
  against the history it holds (`zeus_run.rundir.resume.choose_run_dir`: a history recorded under other
  decision settings is refused, or with ``force`` a sibling is started; a history whose ``spec.yaml`` is gone
  is checked by `history_mismatches`, a replay of every decision); a run directory names itself, and its spec
  is its own ``spec.yaml`` (`zeus_run.rundir.opener.stored_spec`).
* `open_job`: the lock (`zeus_run.rundir.opener.lock`, as the door's role), a torn history tail cut, the
  trials a dead launcher left recorded as interrupted or adopted (`zeus_run.rundir.resume.recover`, with the
  door's executors), and the asks in flight. What differs between the doors is a parameter.

The run directory (`zeus_run.rundir`) is storage: the cost, the optimizer and the replay it needs to check a
history come from here.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from zeus_run.contract import RunningMarker, StopReason, reaches_target
from zeus_run.cost import zeus_cost
from zeus_run.engine.knobs import Knobs
from zeus_run.engine.measure import unwatched_span
from zeus_run.engine.record import interrupted_record, marker_record
from zeus_run.engine.replay import audit
from zeus_run.errors import UsageError
from zeus_run.records import TrialRecord
from zeus_run.rundir import resume
from zeus_run.rundir.opener import JobDir, lock, stored_spec
from zeus_run.rundir.store import RunDir, read_running
from zeus_run.spec import JobSpec, load_spec

__all__ = [
    "OpenJob",
    "choose_run_dir",
    "compatibility",
    "history_mismatches",
    "locate",
    "open_job",
    "pending_records",
]


def locate(
    job: str | Path | JobSpec, run_dir: str | Path | None = None, *, new: bool = False, force: bool = False
) -> JobDir:
    """The run directory a door uses for ``job``, and the job's spec.

    Args:
        job: A parsed spec, a spec file (YAML), or a run directory that has a ``spec.yaml``.
        run_dir: The run directory, if not the spec's ``run_dir`` (or, for a run directory, itself).
        new: Start a fresh sibling whatever the history (``run --new``).
        force: Start (or resume) a sibling when the history was recorded under other settings.

    Raises:
        SpecError: The spec is invalid.
        UsageError: ``job`` is neither a spec file nor a run directory.
        RunDirError: The run directory's history or settings cannot be used with this spec.
    """
    if isinstance(job, JobSpec):
        base = Path(run_dir) if run_dir is not None else None
        if not new and not force:  # an upgrade's new default revision goes on under the recorded one
            job = resume.keep_recorded_revision(job, (base or job.run_dir).absolute())
            job = resume.keep_recorded_warm_start(job, (base or job.run_dir).absolute())
        path, resumed = choose_run_dir(job, base, new, force)
        return JobDir(job, path, resumed)
    p = Path(job)
    if p.is_dir():
        return JobDir(stored_spec(p), Path(run_dir) if run_dir is not None else p, True)
    if not p.is_file():
        raise UsageError(
            f"job = {str(p)!r}: no such spec file or run directory. Pass a job spec (job.yaml) or a run directory "
            "that has a spec.yaml."
        )
    return locate(load_spec(p), run_dir, new=new, force=force)


@dataclass(frozen=True)
class OpenJob:
    """A job's run directory, locked and settled by `open_job`.

    Attributes:
        rd: The locked run directory.
        spec: The job.
        history: Every record, in the order they were folded (the interrupted trials of a dead launcher
            included), when the door asked for it (``read_history``); None otherwise.
        adopted: The trials a dead launcher started that go on (its executors adopted them), in trial order
            (`zeus_run.engine.request.request_of` turns each back into the engine's request).
        asks: The asks in flight (ask/tell), in trial order.
    """

    rd: RunDir
    spec: JobSpec
    history: list[TrialRecord] | None
    adopted: list[RunningMarker]
    asks: list[RunningMarker]


@contextlib.contextmanager
def open_job(
    path: Path,
    spec: JobSpec,
    role: str,
    *,
    cleanup: Callable[[list[RunningMarker]], set[int]] | None = None,
    read_history: bool = False,
    held: AbstractContextManager[RunDir] | None = None,
    on_locked: Callable[[RunDir, contextlib.ExitStack], None] | None = None,
) -> Iterator[OpenJob]:
    """Lock a job's run directory as ``role`` and settle what it holds, the one sequence of every door.

    Under the lock: the door's own first step (``on_locked``), a torn history tail cut, then the trials a dead
    launcher left in ``running.json`` settled (`zeus_run.rundir.resume.recover`: adopted by the door's
    executors, or recorded as interrupted with the engine's decision), and the asks in flight read.

    Args:
        path: The run directory (`locate`'s).
        role: ``run`` (a launcher: holds it for its whole run), or a brief holder: ``ask``, ``tell``, ``expire``,
            ``cancel``, ``register`` (`zeus_run.rundir.opener.lock`).
        cleanup: The door's executors' `zeus_run.executors.recover_trials` (the launcher's may adopt trials that
            go on; ask/tell's adopt none); None: a dead launcher's trials are left as they are (a registration).
        read_history: Read the history (and settle a dead launcher's trials even when none is marked), as a
            launcher does; otherwise it is read only when a dead launcher's trials are settled.
        held: The lock already taken (a ``--next`` trigger that took it instead of joining); None: take it.
        on_locked: The door's step right after the lock, before anything is read (the launcher: forget a run
            directory it created if nothing gets recorded, open its energy source). What it pushes on the
            stack it is given is undone when the job is closed, before the lock is let go.

    Raises:
        RunDirBusy: A launcher holds it, or another brief holder held it past `zeus_run.rundir.opener.LOCK_WAIT`.
        RunDirError, HistoryError: It cannot be used.
    """
    with held if held is not None else lock(path, role) as rd, contextlib.ExitStack() as door:
        if on_locked is not None:
            on_locked(rd, door)
        rd.history.repair_tail()
        history = None
        adopted: list[RunningMarker] = []
        markers = rd.running_trials() or []
        if cleanup is not None and (read_history or any(not m.asked for m in markers)):
            recovered = resume.recover(rd, cleanup, lambda m: _interrupted(spec, rd, m))
            history, adopted = recovered.history, recovered.adopted
            markers = rd.running_trials() or []
        asks = sorted((m for m in markers if m.asked), key=lambda m: m.trial)
        yield OpenJob(rd, spec, history, adopted, asks)


def _interrupted(spec: JobSpec, rd: RunDir, marker: RunningMarker) -> TrialRecord:
    """A dead launcher's trial that does not go on, with the span it ran charged (energy spent always counts)."""
    spent = unwatched_span(marker, rd.history.read(warn=False), spec.energy.watts, spec.eta)
    return interrupted_record(spec, marker, spent)


# -- checking a history against a spec -------------------------------------------------------


def choose_run_dir(spec: JobSpec, run_dir: Path | None, new: bool, force: bool) -> tuple[Path, bool]:
    """`zeus_run.rundir.resume.choose_run_dir`, a history without ``spec.yaml`` checked by `history_mismatches`."""
    return resume.choose_run_dir(spec, run_dir, new, force, _check)


def compatibility(path: Path, spec: JobSpec) -> tuple[list[str], bool]:
    """`zeus_run.rundir.resume.compatibility`, a history without ``spec.yaml`` checked by `history_mismatches`."""
    return resume.compatibility(path, spec, _check)


def _check(records: list[TrialRecord], spec: JobSpec, path: Path) -> list[str]:
    return history_mismatches(records, spec, full=True, path=path)


def history_mismatches(records: list[TrialRecord], spec: JobSpec, full: bool, path: Path | None = None) -> list[str]:
    """Ways in which ``records`` could not have been produced under ``spec``.

    Args:
        records: The history.
        spec: The job spec to continue with.
        full: Check everything the history shows (used when ``spec.yaml`` is
            gone); otherwise only what would stop the optimizer from folding it.
        path: The run directory, whose trials in flight (``running.json``) are audited too.
    """
    out = resume.foreign_batch_sizes(records, spec, in_order=full)
    if out or not full:
        return out
    observed = 0
    for i, r in enumerate(records):
        if r.kind == "real" and r.seed is not None and r.seed != spec.seed + observed:
            out.append(f"line {i + 1}: the script's seed {r.seed} is not seed={spec.seed} + {observed} trials")
            break
        observed += r.observed
        if r.kind == "real" and r.observed and r.stop_reason is not StopReason.SKIPPED:
            expected = zeus_cost(r.energy, r.time, spec.eta, r.max_power)
            if not math.isclose(r.cost, expected, rel_tol=1e-6, abs_tol=1e-6):
                out.append(
                    f"line {i + 1}: its cost {r.cost:g} J is not eta={spec.eta:g} x energy + ... ({expected:g} J)"
                )
                break
        if r.kind == "real" and r.epochs > spec.max_epochs:
            out.append(f"line {i + 1}: {r.epochs} epochs is more than max_epochs={spec.max_epochs}")
            break
        hit = any(reaches_target(m, spec.target_metric, spec.higher_is_better) for m in r.metrics)
        if r.kind == "real" and r.metrics and hit != r.reached:
            out.append(
                f"line {i + 1}: its metrics {list(r.metrics)} {'do not reach' if r.reached else 'reach'} the target"
            )
            break
    if out:
        return out
    result = audit(records, Knobs.from_spec(spec, path), pending_records(path, records) if path is not None else [])
    if result.divergence is not None:
        out.append(f"replaying its decisions diverges at {result.divergence.describe()}")
    return out


def pending_records(path: Path, records: list[TrialRecord]) -> list[TrialRecord]:
    """The trials a run directory's ``running.json`` names that ``records`` do not hold yet, as records of
    their decision (for `zeus_run.engine.replay.audit`'s ``in_flight``)."""
    recorded = {r.trial for r in records}
    job = records[0].job if records else ""
    return [marker_record(job, m) for m in read_running(path) or [] if m.trial not in recorded]
