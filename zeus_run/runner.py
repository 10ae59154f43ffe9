"""Real runs: the engine driving training scripts as subprocesses, with a durable run directory.

This is the library API behind ``zeus-run run``; tests call `run_job` directly.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from zeus_run.cost import scale_learning_rate
from zeus_run.energy import EnergySource, open_energy_source
from zeus_run.engine import Engine, TrialRequest, position
from zeus_run.errors import Interrupted
from zeus_run.optimizer import make_optimizer
from zeus_run.power import PowerSession, open_power_session
from zeus_run.records import TrialRecord
from zeus_run.rundir import RunDir, check_writable, choose_run_dir
from zeus_run.spec import JobSpec, substitute
from zeus_run.trial import NullListener, TrialListener, TrialPlan, preflight, run_trial

logger = logging.getLogger(__name__)


class RunListener(TrialListener, Protocol):
    """Live progress of a whole run (the CLI renders it; `NullRunListener` ignores it)."""

    def on_run_start(self, spec: JobSpec, run_dir: Path, energy: str, done: int) -> None: ...

    def on_trial_start(self, req: TrialRequest, learning_rate: float | None, trial_dir: Path) -> None: ...

    def on_trial_end(self, record: TrialRecord) -> None: ...


class NullRunListener(NullListener):
    """Ignores everything."""

    def on_run_start(self, spec: JobSpec, run_dir: Path, energy: str, done: int) -> None:
        pass

    def on_trial_start(self, req: TrialRequest, learning_rate: float | None, trial_dir: Path) -> None:
        pass

    def on_trial_end(self, record: TrialRecord) -> None:
        pass


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


def learning_rate_for(spec: JobSpec, batch_size: int) -> float | None:
    """The learning rate passed to the script for ``batch_size``."""
    if spec.learning_rate is None:
        return None
    return scale_learning_rate(spec.learning_rate, spec.default_batch_size, batch_size, spec.lr_scaling)


def placeholder_values(
    spec: JobSpec, batch_size: int, seed: int, recurrence: int, attempt: int, log_dir: Path
) -> dict[str, object]:
    """Values of the ``{placeholders}`` for one trial."""
    lr = learning_rate_for(spec, batch_size)
    return {
        "batch_size": batch_size,
        "learning_rate": "" if lr is None else repr(lr),
        "seed": seed,
        "epochs": spec.max_epochs,
        "target_metric": repr(spec.target_metric),
        "recurrence": recurrence,
        "try": attempt,
        "python": sys.executable,
        "log_dir": str(log_dir),
    }


def run_job(
    spec: JobSpec,
    *,
    run_dir: Path | None = None,
    listener: RunListener | None = None,
    energy: EnergySource | None = None,
    new: bool = False,
    force: bool = False,
    cancel: threading.Event | None = None,
    grace: float = 5.0,
) -> RunResult:
    """Run (or resume) a recurring job until ``spec.recurrences`` recurrences converged.

    Args:
        spec: The validated job spec.
        run_dir: Override of ``spec.run_dir``.
        listener: Receives live progress.
        energy: Energy source to use (default: opened from ``spec.energy``).
        new: Always start a fresh run directory (a sibling if the directory has history).
        force: If the stored spec differs in decision settings, start a fresh sibling instead of refusing.
        cancel: Set it to stop the current trial and return (as SIGINT does).
        grace: Seconds between SIGTERM and SIGKILL when stopping a trial.

    Raises:
        RunDirError, LaunchError, HistoryError, EnergyError: Setup problems (nothing recorded).
        ConvergenceError: The job cannot reach its target.
        Interrupted: SIGINT/SIGTERM arrived; the trial was recorded as interrupted.
    """
    lst: RunListener = listener or NullRunListener()
    path, resumed = choose_run_dir(spec, run_dir, new, force)
    _preflight_default(spec)
    cancel = cancel or threading.Event()
    with contextlib.ExitStack() as stack:
        rd = stack.enter_context(RunDir.open(path))
        if energy is None:
            energy = stack.enter_context(open_energy_source(spec.energy))
        history = _recover(rd, spec)
        if rd.stored_spec() is None:
            rd.save_spec(spec)
        resumed = resumed and bool(history)
        done = position(history).completed
        lst.on_run_start(spec, rd.path, energy.describe(), done)
        if done >= spec.recurrences:
            logger.info(
                "all %d recurrences are already done in %s; raise `recurrences` to run more", spec.recurrences, rd.path
            )
            return RunResult(rd.path, list(history), [], energy.describe(), resumed)
        power = open_power_session(spec.power_limit, spec.eta, energy, rd.path)
        if power is not None:
            stack.callback(power.controller.restore)  # at the end of the run, whatever happens
        optimizer = make_optimizer(spec.optimizer, spec.batch_sizes, spec.default_batch_size, spec.seed)
        engine = Engine(optimizer, spec.recurrences, spec.max_tries, spec.beta)
        signum = stack.enter_context(_signals_to(cancel))

        def execute(req: TrialRequest) -> TrialRecord:
            if cancel.is_set():  # a signal arrived between trials: nothing is running
                raise _interrupted(signum[0], rd.path, f"before recurrence {req.recurrence}, try {req.attempt} started")
            return _execute(spec, rd, energy, lst, cancel, grace, req, power)

        def persist(record: TrialRecord) -> None:
            rd.history.append(record)
            rd.clear_running()
            lst.on_trial_end(record)

        new_records = engine.run(history, execute, persist)
        if new_records and new_records[-1].stop_reason == "interrupted":
            last = new_records[-1]
            raise _interrupted(
                signum[0],
                rd.path,
                f"during recurrence {last.recurrence}, try {last.attempt}; that trial is recorded as interrupted and will be re-run",
            )
        return RunResult(rd.path, list(history) + new_records, new_records, energy.describe(), resumed)


def _execute(
    spec: JobSpec,
    rd: RunDir,
    energy: EnergySource,
    lst: RunListener,
    cancel: threading.Event,
    grace: float,
    req: TrialRequest,
    power: PowerSession | None = None,
) -> TrialRecord:
    bs = req.decision.batch_size
    lr = learning_rate_for(spec, bs)
    seed = spec.seed + req.observed
    tdir = rd.trial_dir(req.recurrence, req.attempt)
    argv, env = _command(spec, placeholder_values(spec, bs, seed, req.recurrence, req.attempt, tdir))
    env.update(
        {
            "ZEUS_BATCH_SIZE": str(bs),
            "ZEUS_LEARNING_RATE": "" if lr is None else repr(lr),
            "ZEUS_SEED": str(seed),
            "ZEUS_TARGET_METRIC": repr(spec.target_metric),
            "ZEUS_HIGHER_IS_BETTER": "1" if spec.higher_is_better else "0",
            "ZEUS_MAX_EPOCHS": str(spec.max_epochs),
            "ZEUS_ETA_KNOB": repr(spec.eta),
            "ZEUS_COST_THRESH": repr(req.cost_threshold),
            "ZEUS_LOG_DIR": str(tdir),
            "ZEUS_JOB_ID": f"{spec.name}-r{req.recurrence}-t{req.attempt}",
            "ZEUS_RECURRENCE": str(req.recurrence),
            "ZEUS_TRY": str(req.attempt),
            "ZEUS_EVENT_LOG": str(tdir / "events.jsonl"),
            "ZEUS_STOP_FILE": str(tdir / "stop"),
        }
    )
    profiler = power.profiler_for(bs) if power is not None else None
    profiling = profiler is not None and not profiler.done
    env.pop("ZEUS_PROFILE", None)
    env.pop("ZEUS_PROFILE_STOP", None)
    if profiling:
        env.update({"ZEUS_PROFILE": "1", "ZEUS_PROFILE_STOP": str(tdir / "profile_done")})
    plan = TrialPlan(
        argv=argv,
        shell=spec.shell,
        workdir=spec.workdir,
        env=env,
        log_path=tdir / "output.log",
        event_path=tdir / "events.jsonl",
        stop_path=tdir / "stop",
        max_epochs=spec.max_epochs,
        target_metric=spec.target_metric,
        higher_is_better=spec.higher_is_better,
        metric_regex=spec.metric.regex if spec.metric.source == "regex" else None,
        eta=spec.eta,
        cost_threshold=req.cost_threshold,
        timeout=spec.timeout,
        grace=grace,
        profile_stop_path=tdir / "profile_done" if profiling else None,
    )
    preflight(plan.argv, plan.workdir, plan.env, plan.shell)
    check_writable(rd.path)
    started = _now()
    rd.mark_running(
        {
            "recurrence": req.recurrence,
            "attempt": req.attempt,
            "trial": req.trial,
            "batch_size": bs,
            "stage": req.decision.stage,
            "learning_rate": lr,
            "seed": seed,
            "started_at": started,
            "pid": os.getpid(),
            "energy_source": energy.name,
            "max_power": energy.max_power,
        }
    )
    lst.on_trial_start(req, lr, tdir)
    invalid_before = energy.invalid_windows
    try:
        out = run_trial(plan, energy, lst, cancel, profiler)
    finally:
        if power is not None:
            power.controller.restore()  # each GPU's original limit and persistence mode
    message = out.message
    invalid = energy.invalid_windows - invalid_before
    if invalid:
        message = _prepend(
            f"a GPU energy counter went backwards {invalid} time(s) (driver reload?); that energy is not counted",
            message,
        )
    if power is not None and profiler is not None:
        power.trial_done(bs, profiler)
        if power.settings.observer_mode and out.power_limit is not None:
            message = _prepend(
                f"observer mode: ran at the maximum power limit; time and energy counted as if at {out.power_limit:g} W",
                message,
            )
    return TrialRecord(
        job=spec.name,
        recurrence=req.recurrence,
        attempt=req.attempt,
        trial=req.trial,
        batch_size=bs,
        stage=req.decision.stage,
        detail=req.decision.detail,
        epochs=out.epochs,
        time=out.time,
        energy=out.energy,
        max_power=out.max_power,
        cost=out.cost,
        reached=out.reached,
        stop_reason=out.stop_reason,
        observed=out.stop_reason != "interrupted",
        energy_source=energy.name,
        estimated=energy.estimated,
        kind="real",
        power_limit=out.power_limit,
        energy_method=energy.method,
        learning_rate=lr,
        seed=seed,
        cost_threshold=None if req.cost_threshold == float("inf") else req.cost_threshold,
        metrics=out.metrics,
        exit_code=out.exit_code,
        started_at=started,
        ended_at=_now(),
        log=str((tdir / "output.log").relative_to(rd.path)),
        message=message,
    )


def _recover(rd: RunDir, spec: JobSpec) -> list[TrialRecord]:
    """Read the history, cutting a torn tail and recording a trial the launcher died in."""
    rd.history.repair_tail()
    history = list(rd.history.read())
    info = rd.running()
    if info is None:
        return history
    if "recurrence" in info and "attempt" in info:
        _kill_orphans(rd.trial_dir(int(info["recurrence"]), int(info["attempt"])) / "events.jsonl")
    if info.get("trial") == len(history) and "batch_size" in info:
        record = TrialRecord(
            job=spec.name,
            recurrence=int(info["recurrence"]),
            attempt=int(info["attempt"]),
            trial=len(history),
            batch_size=int(info["batch_size"]),
            stage=str(info.get("stage", "")),
            epochs=0,
            time=0.0,
            energy=0.0,
            max_power=float(info.get("max_power", 0.0)),
            cost=0.0,
            reached=False,
            stop_reason="interrupted",
            observed=False,
            energy_source=str(info.get("energy_source", "")),
            learning_rate=info.get("learning_rate"),
            seed=info.get("seed"),
            started_at=info.get("started_at"),
            log=f"trials/r{int(info['recurrence']):04d}-t{int(info['attempt']):02d}/output.log",
            message=f"the launcher (pid {info.get('pid')}) died during this trial; it was not fed to the optimizer",
        )
        logger.warning(
            "recurrence %d try %d was running when the launcher stopped; recorded as interrupted and re-run",
            record.recurrence,
            record.attempt,
        )
        rd.history.append(record)
        history.append(record)
    rd.clear_running()
    return history


def _kill_orphans(event_log: Path) -> None:
    """Kill training processes a dead launcher left behind (found by their ``ZEUS_EVENT_LOG``).

    The script runs in its own session, so it outlives a launcher killed with
    SIGKILL. Only processes whose environment names this trial's event log
    are touched; on systems without ``/proc`` this does nothing.
    """
    needle = f"ZEUS_EVENT_LOG={event_log}".encode() + b"\0"
    proc = Path("/proc")
    if not proc.is_dir():
        return
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ:
            pid = int(entry.name)
            logger.warning("killing training process %d left running by the previous launcher", pid)
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _prepend(note: str, message: str | None) -> str:
    return note if message is None else f"{note}; {message}"


def _command(spec: JobSpec, values: dict[str, object]) -> tuple[tuple[str, ...], dict[str, str]]:
    """The trial's argv and environment (before the ``ZEUS_*`` variables), placeholders substituted."""
    argv = tuple(substitute(a, values, shell=spec.shell) for a in spec.command)
    env = dict(os.environ)
    env.update({k: substitute(v, values) for k, v in spec.env.items()})
    return argv, env


def _preflight_default(spec: JobSpec) -> None:
    argv, env = _command(spec, placeholder_values(spec, spec.default_batch_size, spec.seed, 1, 1, spec.run_dir))
    preflight(argv, spec.workdir, env, spec.shell)


@contextlib.contextmanager
def _signals_to(cancel: threading.Event) -> Iterator[list[int | None]]:
    """Route SIGINT/SIGTERM to ``cancel`` while a run is in progress (main thread only)."""
    received: list[int | None] = [None]
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, _frame: object) -> None:
        received[0] = signum
        cancel.set()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
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


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
