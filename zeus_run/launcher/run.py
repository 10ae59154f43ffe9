"""Real runs: the engine driving training scripts through an executor, with a durable run directory.

This is the library API behind ``zeus-run run``; tests call `run_job` directly.
`run_job` is three steps: locate the run directory and open the job as every door does
(`zeus_run.door.locate`, `zeus_run.door.open_job`: locked, a dead launcher's trials adopted or recorded, the asks
settled, the spec kept, the warm start copied, the engine made), then run it: trials are run by an executor
(`zeus_run.executors`), and the engine (`zeus_run.engine.core`) decides what to run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zeus_run.contract import StopReason
from zeus_run.door import OpenJob, locate, open_job
from zeus_run.energy import EnergySource
from zeus_run.engine.concurrent import SlotPool
from zeus_run.engine.core import Engine, TimedExecutor, TrialExecutor, TrialRequest
from zeus_run.engine.ledger import Ledger
from zeus_run.engine.position import Position, position
from zeus_run.errors import Interrupted, RunDirError
from zeus_run.executors import (
    EXECUTORS,
    NullRunListener,
    RealExecutor,
    RunListener,
    command,
    learning_rate_for,
    marker,
    now,
    placeholder_values,
    provenance,
    recover_trials,
)
from zeus_run.power import PowerSession, open_power_session
from zeus_run.records import TrialRecord
from zeus_run.rundir import joins
from zeus_run.rundir.history import HISTORY_NAME, HistoryStore
from zeus_run.rundir.joins import JoinDesk
from zeus_run.rundir.lock import is_held
from zeus_run.rundir.opener import lock
from zeus_run.rundir.ranout import ran_out
from zeus_run.rundir.settings import read_once
from zeus_run.rundir.store import first_missing
from zeus_run.spec import JobSpec
from zeus_run.trial.launch import launch_error
from zeus_run.trial.run import preflight, trial_environment

logger = logging.getLogger(__name__)

__all__ = [
    "NullRunListener",
    "RunListener",
    "RunResult",
    "learning_rate_for",
    "placeholder_values",
    "provenance",
    "run_job",
]


@dataclass
class RunResult:
    """What `run_job` did.

    Attributes:
        run_dir: The run directory used.
        records: Every record in the history, old and new.
        new: Records produced by this call.
        energy: Description of the energy source.
        resumed: Whether the run continued an existing history.
    """

    run_dir: Path
    records: list[TrialRecord]
    new: list[TrialRecord] = field(default_factory=list)
    energy: str = ""
    resumed: bool = False

    @property
    def failed(self) -> list[TrialRecord]:
        """The last try of each recurrence that failed in this call (used up ``max_tries`` without the target):
        the job goes on with the next recurrence, and ``zeus-run run`` exits with
        `zeus_run.errors.RECURRENCE_FAILED_EXIT_CODE`."""
        return [r for r in self.new if r.recurrence_failed is not None]


def run_job(
    spec: JobSpec,
    *,
    run_dir: Path | None = None,
    listener: RunListener | None = None,
    energy: EnergySource | None = None,
    new: bool = False,
    force: bool = False,
    cancel: threading.Event | None = None,
    next_recurrences: int | None = None,
    triggered_at: str | None = None,
    until: int | None = None,
) -> RunResult:
    """Run (or resume) a recurring job until ``spec.recurrences`` recurrences ended (reached the target, or failed).

    A recurrence that uses up ``max_tries`` without the target fails: it is recorded as failed
    (`RunResult.failed`) and the run goes on with the next recurrence. The optimizer plans over the
    job's ``recurrences`` (or an open-ended job's ``lifetime``), never over what one call runs.

    Args:
        spec: The validated job spec.
        run_dir: Override of ``spec.run_dir``.
        listener: Receives live progress.
        energy: Energy source to use (default: opened from ``spec.energy``).
        new: Always start a fresh run directory (a sibling if the directory has history).
        force: If the stored spec differs in decision settings, start a fresh sibling instead of refusing.
        cancel: Set it to stop the current trial and return (as SIGINT, SIGTERM and SIGHUP do).
        next_recurrences: Run this many recurrences past those already done, whatever ``spec.recurrences``
            says (one scheduler trigger: ``zeus-run run JOB.yaml --next``).
        triggered_at: ISO-8601 time of the trigger, stamped on every record (default: now).
        until: Run until this many recurrences have ended in all, whatever ``spec.recurrences`` says
            (``zeus-run run -n N``); the optimizer still plans over the spec's.

    Raises:
        RunDirError, LaunchError, HistoryError, EnergyError: Setup problems (nothing recorded).
        ConvergenceError: The job cannot reach its target (its first recurrence, at the default batch size).
        Interrupted: SIGINT/SIGTERM arrived; the trial was recorded as interrupted.
    """
    lst: RunListener = listener or NullRunListener()
    trigger = triggered_at or now()
    with contextlib.ExitStack() as stack:
        stack.enter_context(read_once())  # one trigger: its run directory's spec.yaml is read once
        where = locate(spec, run_dir, new=new, force=force)  # locate: the one locator of every door
        spec, path = where.spec, where.path
        _preflight_default(spec)
        cancel = cancel or threading.Event()
        created = not path.exists() or not any(path.iterdir())
        held = None
        if next_recurrences is not None and spec.concurrency > 1:
            # A trigger with overlap allowed: the launcher holding the run directory runs it (`zeus_run.rundir.joins`).
            held = joins.hold_or_join(lambda: lock(path, "run"), path)
            if held is None:
                return _join(spec, path, next_recurrences, trigger, lst, cancel, run_dir, energy, force)
        if next_recurrences is None and until is None and spec.recurrences is None:
            next_recurrences = 1  # open-ended: each launch runs one more recurrence
        power: list[PowerSession | None] = [None]  # opened once the job is open and has recurrences to run
        b0 = spec.default_batch_size
        job = stack.enter_context(
            open_job(  # open: the one opener of every door; this one's executors adopt the trials that go on
                path,
                spec,
                "run",
                cleanup=lambda markers: recover_trials(markers, spec.executor.kind),
                held=held,
                forget=created,
                creates=first_missing(path),  # parents this run creates too (`runs/` of `runs/job`)
                energy=(lambda: contextlib.nullcontext(energy))
                if energy is not None
                else (lambda: EXECUTORS[spec.executor.kind].open_energy(spec)),
                recurrences=lambda at: _until(spec, at.ended, next_recurrences, until),
                profile=lambda: power[0].store.get(b0) if power[0] is not None else (),
            )
        )
        return _run(job, where.resumed, lst, cancel, trigger, power, stack)  # run


def _until(spec: JobSpec, done: int, next_recurrences: int | None, until: int | None) -> int:
    """Where this call stops: ``next_recurrences`` past those ``done``, or ``until``, or the spec's."""
    if next_recurrences is not None:
        return done + next_recurrences
    if until is not None:
        return until
    assert spec.recurrences is not None
    return spec.recurrences


def _run(
    job: OpenJob,
    resumed: bool,
    lst: RunListener,
    cancel: threading.Event,
    trigger: str,
    power: list[PowerSession | None],
    stack: contextlib.ExitStack,
) -> RunResult:
    """Run the opened job's recurrences, through its executor, until its engine's limit."""
    rd, engine, energy, saver = job.rd, job.engine, job.energy, job.saver
    assert engine is not None and energy is not None and saver is not None
    history = job.records()
    resumed = resumed and bool(history)
    where_now = job.position()
    done = where_now.ended
    total = engine.recurrences
    spec = job.spec if total == job.spec.recurrences else job.spec.with_overrides(recurrences=total)
    _say_failed(history, where_now, spec.max_tries)
    lst.on_run_start(spec, rd.path, energy.describe(), done)
    if done >= total:
        logger.info("all %d recurrences are already done in %s; raise `recurrences`, or run `--next`", total, rd.path)
        return RunResult(rd.path, list(history), [], energy.describe(), resumed)
    power[0] = open_power_session(spec.power_limit, spec.eta, energy, rd.path, spec.goal)
    if power[0] is not None:
        stack.callback(power[0].controller.restore)  # at the end of the run, whatever happens
    desk = JoinDesk(rd.path, total + 1, lst.on_more_recurrences) if spec.concurrency > 1 else None
    signum = stack.enter_context(_signals_to(cancel))
    if spec.concurrency > 1:
        lst = _Serialized(lst)  # trials report from several threads
    executor = EXECUTORS[spec.executor.kind](spec, rd, energy, lst, cancel, power[0])
    stack.callback(executor.close)
    # The one saver of every door (record, history, live exports); a missing MLflow is refused before any trial.
    saver.check_exports()

    def check_cancel(req: TrialRequest) -> None:
        if cancel.is_set():  # a signal arrived between trials: this one has not started
            raise _interrupted(signum[0], rd.path, f"before recurrence {req.recurrence}, try {req.attempt} started")

    def execute(req: TrialRequest) -> TrialRecord:
        check_cancel(req)
        return executor(req)

    def persist(record: TrialRecord) -> None:
        triggered = desk.triggers.get(record.recurrence, trigger) if desk is not None else trigger
        saver.save(dataclasses.replace(record, triggered_at=record.triggered_at or triggered))
        lst.on_trial_end(record)
        saver.publish()  # the live exports: MLflow, Pushgateway (spec section `export`)

    def note(ledger: Ledger, record: TrialRecord) -> None:
        saver.note(ledger, record.trial)  # what the engine believes now, for the views (belief.json)

    adopted = job.adopted
    if spec.concurrency == 1:
        new_records = engine.run(history, execute, persist, adopted, on_fold=note)
    else:
        new_records = _run_concurrent(
            engine, history, adopted, executor, spec.concurrency, check_cancel, persist, cancel, desk, note
        )
    interrupted = [r for r in new_records if r.stop_reason is StopReason.INTERRUPTED]
    if interrupted:
        last = interrupted[-1]
        raise _interrupted(
            signum[0],
            rd.path,
            f"during recurrence {last.recurrence}, try {last.attempt}; "
            + ("that trial is" if len(interrupted) == 1 else f"{len(interrupted)} trials are")
            + " recorded as interrupted and will be re-run",
        )
    return RunResult(rd.path, list(history) + new_records, new_records, energy.describe(), resumed)


def _say_failed(history: list[TrialRecord], where: Position, max_tries: int) -> None:
    """Log (for a cron log) that the last recurrence before this call failed, and that the job goes on."""
    if not where.failed or not history:
        return
    last = max(history, key=lambda r: r.recurrence)
    if last.reached or where.recurrence <= last.recurrence:
        return
    why = last.recurrence_failed or (
        f"it used up max_tries {max_tries} without the target (recorded before failed recurrences were marked)"
    )
    logger.info("recurrence %d failed: %s; the job goes on with recurrence %d", last.recurrence, why, where.recurrence)


def _run_concurrent(
    engine: Engine,
    history: list[TrialRecord],
    adopted: list[TrialRequest],
    executor: RealExecutor,
    slots: int,
    check_cancel: Callable[[TrialRequest], None],
    persist: Callable[[TrialRecord], None],
    cancel: threading.Event,
    desk: JoinDesk | None = None,
    note: Callable[[Ledger, TrialRecord], None] | None = None,
) -> list[TrialRecord]:
    """Run with several recurrences in flight: the executor's own ``start``/``wait_any`` (Slurm), or N local slots.

    If the run stops on an error, the trials still in flight are stopped and their
    records (stamped with their decision's context) are written before the error
    goes on: no trial's record is lost.
    """
    pool = None
    if isinstance(executor, TrialExecutor):  # runs trials at once by itself (Slurm jobs)
        target: TrialExecutor = executor
    else:  # local: N slots, a thread each
        run_on_slot = getattr(executor, "run_on_slot", None) or (lambda req, slot: executor(req))
        pool = target = SlotPool(run_on_slot, slots)

    adopted_trials = {req.trial for req in adopted}

    class _Checked:
        def start(self, req: TrialRequest) -> None:
            check_cancel(req)
            # Marked before the trial's thread starts, so that trials are marked in the order
            # they start: a launcher killed now leaves every started trial to be recorded.
            # An adopted trial keeps the marker that finds it again (its job).
            marked = req.trial not in adopted_trials
            if marked:
                try:
                    executor.rd.mark_running(marker(executor.spec, req, executor.energy))
                except (OSError, RunDirError) as exc:  # too many open files, disk full: nothing started, no marker
                    short = ran_out(exc)
                    if short is None:
                        raise
                    raise launch_error(executor.spec.command[0], short) from exc
            try:
                target.start(req)
            except BaseException:
                if marked:  # its thread did not start: no try was used, and no marker may name it
                    executor.rd.clear_running(req.trial)
                raise

        def wait_any(self) -> TrialRecord:
            return target.wait_any()

        def wait_for(self, timeout: float | None) -> TrialRecord | None:
            if isinstance(target, TimedExecutor):
                return target.wait_for(timeout)
            return target.wait_any()

    try:
        more = desk.claim if desk is not None else None
        return engine.run(history, _Checked(), persist, adopted, more=more, on_fold=note)
    except BaseException:
        cancel.set()  # stop the trials still in flight, then record them
        left = pool.close() if pool is not None else executor.drain()
        for req, record in left:
            persist(req.stamp(record))
        try:  # every trial that started is recorded: a marker left of one that never did is dropped
            executor.rd.sync_running()
        except (OSError, RunDirError) as exc:
            logger.warning("could not rewrite running.json: %s", exc)
        raise


def _join(
    spec: JobSpec,
    path: Path,
    k: int,
    trigger: str,
    lst: RunListener,
    cancel: threading.Event,
    run_dir: Path | None,
    energy: EnergySource | None,
    force: bool,
) -> RunResult:
    """Have the launcher that holds ``path`` run ``k`` more recurrences for this trigger, and wait for them.

    If the launcher lets go of the run directory first (it stopped, or died), what is left of the
    ``k`` recurrences is run here, as a resumed run.
    """
    store = HistoryStore(path / HISTORY_NAME)

    def claimed(got: joins.JoinRequest) -> None:
        done = position(list(store.read(warn=False)), spec.max_tries).ended
        measured = f"measured by the launcher it joined ({got.holder})"
        lst.on_run_start(spec.with_overrides(recurrences=max(got.granted)), path, measured, done)

    # The signals go to ``cancel`` before the request is written: a SIGINT right after it withdraws it.
    with _signals_to(cancel) as signum:
        req = joins.request(path, k, trigger)
        logger.info(
            "%s is held by another launcher and the spec allows overlap (concurrency %d): asked it to run %d more "
            "recurrence(s) for this trigger; waiting for them",
            path,
            spec.concurrency,
            k,
        )
        outcome = joins.wait_for(path, req, lambda: is_held(path), lst.on_trial_end, cancel, claimed)
    if outcome.interrupted is not None:
        raise _interrupted(signum[0], path, outcome.interrupted)
    if outcome.holder_gone and outcome.left > 0:
        logger.warning(
            "the launcher holding %s let go of it before %d of this trigger's recurrence(s) reached the target; "
            "running them here",
            path,
            outcome.left,
        )
        granted = outcome.request.granted
        done = position(list(store.read(warn=False)), spec.max_tries).ended
        # Through the last recurrence granted (a dead holder's unfinished ones come first), else K more.
        more = max(granted) - done if granted else outcome.left
        if more <= 0:  # the holder's last record landed after the wait's last read: nothing is left to run
            records = list(store.read(warn=False))
            seen = {r.trial for r in outcome.records}
            late = [r for r in records if r.recurrence in granted and r.trial not in seen]
            return RunResult(path, records, [*outcome.records, *late], "measured by the launcher it joined", True)
        result = run_job(
            spec,
            run_dir=run_dir,
            listener=lst,
            energy=energy,
            force=force,
            cancel=cancel,
            # through the last recurrence granted, counted from the history (a dead holder's trials this trigger
            # adopts are its own recurrences, not another night's), else K more
            next_recurrences=None if granted else more,
            until=max(granted) if granted else None,
            triggered_at=trigger,
        )
        return dataclasses.replace(result, new=[*outcome.records, *result.new])
    records = list(store.read(warn=False))
    return RunResult(path, records, outcome.records, "measured by the launcher it joined", True)


class _Serialized:
    """A run listener called from several trial threads, one call at a time."""

    def __init__(self, inner: RunListener) -> None:
        self.inner = inner
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if not callable(method):
            return method

        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return method(*args, **kwargs)

        return locked


def _preflight_default(spec: JobSpec) -> None:
    argv, env = command(spec, placeholder_values(spec, spec.default_batch_size, spec.seed, 1, 1, spec.run_dir))
    preflight(argv, spec.workdir, trial_environment(env), spec.shell)


@contextlib.contextmanager
def _signals_to(cancel: threading.Event) -> Iterator[list[int | None]]:
    """Route SIGINT, SIGTERM and SIGHUP (terminal closed) to ``cancel`` while a run is in progress (main thread only)."""
    received: list[int | None] = [None]
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, _frame: object) -> None:
        received[0] = signum
        cancel.set()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield received
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _interrupted(signum: int | None, path: Path, what: str) -> Interrupted:
    sig = signal.Signals(signum or signal.SIGINT)
    return Interrupted(
        sig.value,
        f"Interrupted by {sig.name} {what}. History is intact in {str(path)!r}. Run the same command again to resume.",
    )
