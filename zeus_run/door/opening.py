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
import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from zeus_run.contract import RunningMarker, StopReason, reaches_target
from zeus_run.cost import zeus_cost
from zeus_run.door.calendar import carried
from zeus_run.door.fold import JobFold, folded
from zeus_run.door.lease import settle_asks
from zeus_run.door.save import TrialSaver
from zeus_run.engine.core import Engine
from zeus_run.engine.knobs import Knobs
from zeus_run.engine.measure import unwatched_span
from zeus_run.engine.position import Position, position
from zeus_run.engine.record import interrupted_record, marker_record
from zeus_run.engine.replay import audit
from zeus_run.engine.request import TrialRequest, request_of
from zeus_run.engine.warm import ensure_copy
from zeus_run.errors import UsageError
from zeus_run.records import TrialRecord
from zeus_run.rundir import resume
from zeus_run.rundir.opener import JobDir, lock, stored_spec
from zeus_run.rundir.rates import note_change
from zeus_run.rundir.store import RunDir, changed_fields, read_running, remove_if_unused
from zeus_run.spec import JobSpec, load_spec

if TYPE_CHECKING:
    from zeus_run.energy import EnergySource
    from zeus_run.records import PowerLimitMeasurement

logger = logging.getLogger(__name__)

__all__ = [
    "OpenJob",
    "choose_run_dir",
    "compatibility",
    "engine_of",
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


@dataclass
class OpenJob:
    """A job's run directory, locked and settled by `open_job`, with the engine that decides for it.

    Attributes:
        rd: The locked run directory.
        spec: The job.
        history: Every record, in the order they were folded (the interrupted trials of a dead launcher and the
            asks found expired included), when the door read it (a launcher); None otherwise (read when needed:
            `records`).
        adopted: The trials a dead launcher started that go on (its executors adopted them), as the engine's
            requests, in trial order.
        asks: The asks in flight (ask/tell), in trial order: for a brief holder, those not recorded yet.
        engine: The engine that decides (None: a registration, which decides nothing).
        fold: The history folded, for a brief holder (ask/tell: `zeus_run.door.fold`); None for a launcher.
        saver: The one saver of this job's trials (`zeus_run.door.save.TrialSaver`).
        energy: The energy source a launcher opened (`open_job`'s ``energy``); None otherwise.
        expired: The asks a launcher found expired, as recorded.
    """

    rd: RunDir
    spec: JobSpec
    history: list[TrialRecord] | None
    adopted: list[TrialRequest]
    asks: list[RunningMarker]
    engine: Engine | None = None
    fold: JobFold | None = None
    saver: TrialSaver | None = None
    energy: EnergySource | None = None
    expired: list[TrialRecord] = field(default_factory=list)

    def records(self) -> list[TrialRecord]:
        """Every record (read now if the door did not read the history)."""
        if self.history is None:
            self.history = list(self.rd.history.read(warn=False))
        return self.history

    def position(self) -> Position:
        """Where the job stands (`zeus_run.engine.position.position` of its records)."""
        return position(self.records(), self.spec.max_tries)


#: The roles that start trials: they keep the spec a job starts with and note a change of its rates.
STARTS = ("run", "ask")
#: The brief holders that decide on the history folded (ask/tell, ``exec``, the `Job` API, the server).
BRIEF = ("ask", "tell", "expire", "cancel")


@contextlib.contextmanager
def open_job(
    path: Path,
    spec: JobSpec,
    role: str,
    *,
    cleanup: Callable[[list[RunningMarker]], set[int]] | None = None,
    held: AbstractContextManager[RunDir] | None = None,
    forget: bool = False,
    creates: Path | None = None,
    energy: Callable[[], AbstractContextManager[EnergySource]] | None = None,
    recurrences: Callable[[Position], int] | None = None,
    profile: Callable[[], Sequence[PowerLimitMeasurement] | None] | None = None,
) -> Iterator[OpenJob]:
    """Lock a job's run directory as ``role``, settle what it holds and make its engine: the one sequence of every
    door (``run``, ask/tell, ``exec``, the `Job` API, the server).

    Under the lock, in this order:

    1. ``forget``: the run directory is removed again if nothing gets recorded (a launcher that created it);
    2. the warm start's source checked and copied in (`zeus_run.engine.warm.ensure_copy`), before the energy
       source opens (a wrong one is a spec error);
    3. ``energy`` opened (a launcher's; closed before the lock is let go);
    4. a torn history tail cut, the trials a dead launcher left in ``running.json`` settled
       (`zeus_run.rundir.resume.recover`: adopted by the door's executors, or recorded as interrupted with the
       engine's decision);
    5. the asks in flight settled by role: a launcher records those whose lease ran out and refuses to run beside
       those that live (`zeus_run.door.lease.settle_asks`); a brief holder drops the markers of asks already
       recorded (a tell that died before its marker went) and keeps the others;
    6. a door that starts trials (``run``, ``ask``): the spec saved if the job has none yet (an ask first checks
       that its live exports can be made: MLflow installed), and a change of its rates noted
       (`zeus_run.rundir.rates.note_change`);
    7. the engine: a launcher's for ``recurrences`` (its ``position``'s), a brief holder's kept per spec and run
       directory with its history folded (`zeus_run.door.fold`).

    Args:
        path: The run directory (`locate`'s).
        spec: The job.
        role: ``run`` (a launcher: holds it for its whole run), or a brief holder: ``ask``, ``tell``, ``expire``,
            ``cancel``, ``register`` (`zeus_run.rundir.opener.lock`). A registration settles nothing and makes no
            engine (the server checks and saves its spec itself).
        cleanup: The door's executors' `zeus_run.executors.recover_trials` (the launcher's may adopt trials that
            go on); None: ask/tell's, which adopt none (a registration: a dead launcher's trials are left).
        held: The lock already taken (a ``--next`` trigger that took it instead of joining); None: take it.
        forget: Remove the run directory when the job is closed if nothing was recorded (a launcher that created
            it), with ``creates``, the parents it created too (`zeus_run.rundir.store.first_missing`).
        energy: Opens the launcher's energy source (closed before the lock is let go).
        recurrences: A launcher's: where its engine stops, from where the job stands (None: the spec's).
        profile: A launcher's: reads b0's power profile as its power session stores it (`Knobs.engine`).

    Raises:
        RunDirBusy: A launcher holds it, or another brief holder held it past `zeus_run.rundir.opener.LOCK_WAIT`,
            or (a launcher) asks are in flight.
        RunDirError, HistoryError, SpecError: It cannot be used.
    """
    from zeus_run.executors import recover_trials  # the executors load where a door opens a job

    if cleanup is None and role != "register":
        cleanup = lambda markers: recover_trials(markers, None)  # noqa: E731
    launcher = role not in BRIEF
    with held if held is not None else lock(path, role) as rd, contextlib.ExitStack() as door:
        if forget:  # a run that fails before recording anything leaves no empty run directory
            door.callback(remove_if_unused, rd, creates)
        warm = ensure_copy(rd.path, spec) if role == "run" else None
        source = door.enter_context(energy()) if energy is not None else None
        rd.history.repair_tail()
        history = None
        adopted: list[RunningMarker] = []
        markers = rd.running_trials() or []
        if cleanup is not None and (launcher or any(not m.asked for m in markers)):
            recovered = resume.recover(rd, cleanup, lambda m: _interrupted(spec, rd, m))
            history, adopted = recovered.history, recovered.adopted
            markers = rd.running_trials() or []
        asks = sorted((m for m in markers if m.asked), key=lambda m: m.trial)
        job = OpenJob(rd, spec, history, [request_of(m, spec) for m in adopted], asks)
        if role == "register":
            yield job
            return
        job.saver = TrialSaver(rd, spec.export)
        if role == "run":
            job.expired = settle_asks(rd, spec, job.records(), asks)
            job.asks = []
        else:
            job.engine = engine_of(spec, rd.path)
            job.fold = folded(rd.path, job.engine)
            job.asks = [m for m in asks if m.trial not in job.fold.recorded]
            rd.track_running(job.asks)
            if len(job.asks) < len(asks):  # recorded, then the process died before the marker went
                rd.replace_running(job.asks)
                logger.info("dropped %d marker(s) of asks already recorded", len(asks) - len(job.asks))
        if role == "ask":  # as a launcher refuses before any trial: this trial's tell will export it
            job.saver.check_exports()
        metric_changed = None
        if role in STARTS:
            stored = rd.stored_spec()
            for notice in note_change(rd.path, stored, spec.accounting, lambda: job.position().recurrence):
                logger.warning("%s", notice)  # a changed carbon intensity or price applies from the next recurrence
            metric_changed = changed_fields(stored, spec, "metric")
            rd.keep_spec(spec)  # the spec in force (a new job's first); one it replaces is kept as spec.<n>.yaml
        if role == "run":
            total = recurrences(_carried(job, adopted)) if recurrences is not None else spec.recurrences
            knobs = dataclasses.replace(Knobs.from_spec(spec), warm=warm)
            job.engine = knobs.engine(_NO_LIMIT if total is None else total, profile)
            # a trial then reading none of its output: the spec's error, not the batch size's
            job.engine.metric_changed = metric_changed if history else None
            job.energy = source
        yield job


#: The engine's recurrence limit where none is set (ask/tell: every ask gets the next trial, whatever
#: ``recurrences`` says, as ``run --next`` does); the optimizer still plans over ``recurrences``.
_NO_LIMIT = 2**31 - 1


def engine_of(spec: JobSpec, path: Path) -> Engine:
    """The engine of a job under ask/tell in its run directory ``path`` (one per parsed spec and directory: a
    server asks it for every request). The caller holds the run directory's lock: a warm start's source is
    copied into it the first time (`zeus_run.engine.warm.ensure_copy`)."""
    key = (id(spec), str(path))
    with _ENGINES_LOCK:
        hit = _ENGINES.get(key)
        if hit is not None and hit[0] is spec:
            return hit[1]
    total = spec.recurrences
    knobs = dataclasses.replace(Knobs.from_spec(spec), warm=ensure_copy(path, spec))
    engine = knobs.engine(_NO_LIMIT if total is None else total)
    with _ENGINES_LOCK:
        _ENGINES[key] = (spec, engine)  # the spec is kept, so its id is not reused while here
        while len(_ENGINES) > 64:
            _ENGINES.pop(next(iter(_ENGINES)))
    return engine


_ENGINES: dict[tuple[int, str], tuple[JobSpec, Engine]] = {}
_ENGINES_LOCK = threading.Lock()


def _carried(job: OpenJob, adopted: Sequence[RunningMarker]) -> Position:
    """Where the job stands for ``run --next``: a recurrence an earlier trigger started that this one only takes
    over (a dead launcher's trial adopted, a spec error's trial that reached: `zeus_run.executors.kept`) counts as
    that trigger's night where it started at least half the job's slot ago (`zeus_run.door.calendar`), so the
    calendar catches up; one started tonight is tonight's, and no extra recurrence runs."""
    from zeus_run.executors.kept import kept_model  # the executors load where a door opens a job

    at = job.position()
    records = job.records()
    taken = [(m.recurrence, m.started_at) for m in adopted]
    kept = kept_model(records, job.spec, job.rd.path)
    if kept is not None:
        taken.append((kept.record.recurrence, kept.record.triggered_at or kept.record.started_at))
    n = carried(job.spec, records, taken, time.time())
    if n < len({r for r, _ in taken}):
        logger.info(
            "taken over %d recurrence(s) started this night (less than half the job's slot ago): this trigger "
            "runs no other",
            len({r for r, _ in taken}) - n,
        )
    return dataclasses.replace(at, completed=at.completed + n) if n else at


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
