"""The Python API, in the Optuna shape::

    job = zeus_run.Job("job.yaml")          # or Job(run_dir="runs/nightly")
    with job.ask() as trial:                # a zeus_run.train.Trial, measured and stoppable
        for epoch in trial.epochs():
            ...
            trial.report(val_acc)
    job.record                              # what the with block told

The ``with`` block tells on exit; an exception inside it is recorded as a
crash with its message, and goes on. While the block runs, the `Trial` renews
the ask's lease and measures energy in this process (the spec's energy source:
NVML, RAPL or the estimate on its ``energy.basis``, `zeus_run.energy.SelfMeter`)
over the span a launcher would charge: the first trial of the process from the
process's start (its imports included), each later one from its ask, up to the
end of the block, where it is told; what the process spends after the block
(saving, evaluating, tearing down) up to its next ask or its exit is appended to
the trial's record then (``after_time``, ``after_energy``: `zeus_run.rundir.tails`).
In an interactive process (a notebook) or with ``Job(..., count_startup=False)``,
each trial is its block alone;
the launcher's stop rule (`zeus_run.trial.stop`) asks it to stop when the next
epoch would push the cost past the ask's threshold
(`zeus_run.train.Trial.should_stop` turns true).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from pathlib import Path
from types import TracebackType

from zeus_run._process_trials import PROCESS, asking, interactive
from zeus_run.asktell._ask import Ask, ask
from zeus_run.asktell._session import resolve_job
from zeus_run.asktell._tell import tell, tell_tail, tell_tail_lost
from zeus_run.contract import TrialFiles, exit_status, exit_watch
from zeus_run.engine.measure import Measured
from zeus_run.errors import UsageError
from zeus_run.records import TrialRecord
from zeus_run.spec import JobSpec
from zeus_run.train import Trial

logger = logging.getLogger(__name__)


class Job:
    """A job whose trials this program runs itself, asked for and told back through the run directory.

    Args:
        spec: The job spec (YAML), or None with ``run_dir``.
        run_dir: The run directory (default: the spec's ``run_dir``).
        count_startup: Charge this process's whole life to its trials, as a launcher charges a script from its
            launch to its exit: the first trial from the process's start, each later one from its ask, and each
            trial what the process spends after its block up to the next ask or the exit. False: each trial from
            its ``with`` block's start to its end, for a process that lives on between trials (a notebook, a
            service). None (the default): False in an interactive process (a notebook, a REPL:
            `interactive`), else True.
    """

    def __init__(
        self, spec: str | Path | None = None, *, run_dir: str | Path | None = None, count_startup: bool | None = None
    ) -> None:
        if spec is None and run_dir is None:
            raise UsageError("Job needs a job spec (Job('job.yaml')) or a run directory (Job(run_dir=...)).")
        self._job: str | Path = spec if spec is not None else Path(run_dir or "")
        self._run_dir = run_dir if spec is not None else None
        self.spec: JobSpec
        with asking():  # zeus-run's own time, not the trial's (as a launcher's reading of the spec is not)
            self.spec, self.run_dir = resolve_job(self._job, self._run_dir)
        #: The record the last ``with job.ask()`` block told (None before one ended).
        self.record: TrialRecord | None = None
        self.count_startup = not interactive() if count_startup is None else count_startup

    def ask(self, host: str | None = None) -> AskedTrial:
        """Reserve the next trial; use the result in a ``with`` block (see the module docstring).

        Raises:
            RunDirBusy: A launcher holds the run directory, or ``concurrency`` asks are in flight.
        """
        with asking():  # zeus-run's decision, not the trial's time (`zeus_run.energy.SelfMeter`)
            a = ask(self._job, run_dir=self._run_dir, host=host)
        self.run_dir = a.run_dir
        return AskedTrial(self, a)


class AskedTrial:
    """One asked trial as a context manager: entering gives the `zeus_run.train.Trial`, leaving tells."""

    def __init__(self, job: Job, asked: Ask) -> None:
        self.job = job
        self.asked = asked
        self.trial: Trial | None = None

    def __enter__(self) -> Trial:
        a = self.asked
        spec = self.job.spec
        self.trial = Trial(
            batch_size=a.batch_size,
            learning_rate=a.learning_rate,
            seed=a.seed,
            max_epochs=a.max_epochs,
            target_metric=a.target_metric,
            higher_is_better=a.higher_is_better,
            event_log=str(a.trial_dir / TrialFiles.EVENTS),
            stop_file=str(a.trial_dir / TrialFiles.STOP),
            heartbeat_file=str(a.trial_dir / TrialFiles.HEARTBEAT),  # renews the lease; writes the start event
            lease=a.lease_s,
            # Measured in this process through the spec's energy source, judged by the launcher's stop rule.
            energy=dataclasses.asdict(spec.energy),
            eta=spec.eta,
            cost_threshold=a.cost_threshold,
            timeout=spec.timeout,
            curve_stop=a.curve_stop,
            count_startup=self.job.count_startup,
            told_in_process=True,  # told at the block's end, in this process
        )
        exit_watch().install()  # what the block prints, for a block that ends the process (sys.exit(1))
        return self.trial

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        measured = None
        if self.trial is not None:
            m = self.trial.measured()
            self.trial.close()
            if m is not None:
                measured = Measured.of(*m)
        code, message = _failure(exc)
        run_dir, token = self.asked.run_dir, self.asked.token
        try:
            self.job.record = tell(run_dir, token, exit_code=code, message=message, measured=measured)
        except BaseException:
            if measured is not None and self.job.count_startup:
                # Its after-work is no other trial's: the next trial's window opens at its own ask, not at this close.
                PROCESS.tail_to(functools.partial(_unrecorded, token))
            raise
        if measured is not None and self.job.count_startup:
            # What this process spends after the block (saving, evaluating, tearing down), up to its next ask or
            # its exit, is this trial's too, as a launcher charges a script to its exit (`zeus_run.rundir.tails`).
            orders = {"run_dir": str(Path(run_dir).absolute()), "token": token}
            PROCESS.tail_to(
                functools.partial(tell_tail, run_dir, token, told=True),
                orders,
                lost=functools.partial(tell_tail_lost, run_dir, token),
            )
        # None: an exception raised in the block goes on after it is recorded


def _unrecorded(token: str, time_s: float, energy_j: float, to: str) -> None:
    """The after-work of a trial whose tell failed (no record to charge it to): logged, and charged to no trial."""
    logger.info(
        "trial %s was not told, so its %.1f s (%.1f J) after its block up to the %s are charged to no trial",
        token,
        time_s,
        energy_j,
        to,
    )


def _failure(exc: BaseException | None) -> tuple[int | None, str | None]:
    """The exit code and message a block that ended with ``exc`` is told with: ``sys.exit(n)`` the process's exit
    (with what it printed last, as a launcher reads its log), any other exception a crash with its message."""
    if exc is None:
        return None, None
    if isinstance(exc, SystemExit):
        code = exit_status(exc.code)
        return code, None if code == 0 else f"exit code {code}; last output:\n{exit_watch().output() or '(no output)'}"
    return 1, f"{type(exc).__name__}: {exc}"
