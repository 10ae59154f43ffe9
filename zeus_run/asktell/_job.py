"""The Python API, in the Optuna shape::

    job = zeus_run.Job("job.yaml")          # or Job(run_dir="runs/nightly")
    with job.ask() as trial:                # a zeus_run.train.Trial, measured and stoppable
        for epoch in trial.epochs():
            ...
            trial.report(val_acc)
    job.record                              # what the with block told

The ``with`` block tells on exit; an exception inside it is recorded as a
crash with its message, and goes on. While the block runs, a thread of its
own renews the ask's lease and measures energy in this process (the spec's
energy source: NVML, RAPL or the labelled estimate); when the next epoch
would push the cost past the ask's threshold it asks the trial to stop
(`zeus_run.train.Trial.should_stop` turns true), as the agent does.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from pathlib import Path
from types import TracebackType

from zeus_run.asktell._ask import Ask, ask
from zeus_run.asktell._session import resolve_job
from zeus_run.asktell._tell import Measured, tell
from zeus_run.contract import StopReason, TrialFiles
from zeus_run.cost import zeus_cost
from zeus_run.energy import EnergySource, open_energy_source
from zeus_run.errors import UsageError
from zeus_run.records import TrialRecord
from zeus_run.spec import JobSpec
from zeus_run.train import Trial

logger = logging.getLogger(__name__)

#: Seconds between two checks of the cost against the ask's threshold.
WATCH_INTERVAL = 0.5


class Job:
    """A job whose trials this program runs itself, asked for and told back through the run directory.

    Args:
        spec: The job spec (YAML), or None with ``run_dir``.
        run_dir: The run directory (default: the spec's ``run_dir``).
    """

    def __init__(self, spec: str | Path | None = None, *, run_dir: str | Path | None = None) -> None:
        if spec is None and run_dir is None:
            raise UsageError("Job needs a job spec (Job('job.yaml')) or a run directory (Job(run_dir=...)).")
        self._job: str | Path = spec if spec is not None else Path(run_dir or "")
        self._run_dir = run_dir if spec is not None else None
        self.spec: JobSpec
        self.spec, self.run_dir = resolve_job(self._job, self._run_dir)
        #: The record the last ``with job.ask()`` block told (None before one ended).
        self.record: TrialRecord | None = None

    def ask(self, host: str | None = None) -> AskedTrial:
        """Reserve the next trial; use the result in a ``with`` block (see the module docstring).

        Raises:
            RunDirBusy: A launcher holds the run directory, or ``concurrency`` asks are in flight.
        """
        a = ask(self._job, run_dir=self._run_dir, host=host)
        self.run_dir = a.run_dir
        return AskedTrial(self, a)


class AskedTrial:
    """One asked trial as a context manager: entering gives the `zeus_run.train.Trial`, leaving tells."""

    def __init__(self, job: Job, asked: Ask) -> None:
        self.job = job
        self.asked = asked
        self.trial: Trial | None = None
        self._energy: EnergySource | None = None
        self._start = 0.0
        self._e0 = 0.0
        self._done = threading.Event()
        self._watcher: threading.Thread | None = None

    def __enter__(self) -> Trial:
        a = self.asked
        spec = self.job.spec
        self._energy = open_energy_source(spec.energy)
        self._start, self._e0 = time.monotonic(), self._energy.read()
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
        )
        self._watcher = threading.Thread(target=self._watch, name="zeus-run ask watcher", daemon=True)
        self._watcher.start()
        return self.trial

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._done.set()
        if self._watcher is not None:
            self._watcher.join()
        measured = self._measure()
        if self.trial is not None:
            self.trial.close()
        if self._energy is not None:
            self._energy.close()
        message = None if exc is None else f"{type(exc).__name__}: {exc}"
        self.job.record = tell(
            self.asked.run_dir,
            self.asked.token,
            exit_code=None if exc is None else 1,
            message=message,
            measured=measured,
        )
        # None: an exception raised in the block goes on after it is recorded

    def _measure(self) -> Measured:
        energy = self._energy
        assert energy is not None
        return Measured(
            time=time.monotonic() - self._start,
            energy=max(energy.read() - self._e0, 0.0),
            source=energy.name,
            estimated=energy.estimated,
            method=energy.method,
            max_power=energy.max_power,
        )

    def _watch(self) -> None:
        """Stop the trial when its next epoch would cross the cost threshold (measured here)."""
        a = self.asked
        while not self._done.wait(WATCH_INTERVAL):
            trial = self.trial
            if a.cost_threshold is None or trial is None or trial.epoch < 1:
                continue
            m = self._measure()
            cost = zeus_cost(m.energy, m.time, self.job.spec.eta, m.max_power)
            if cost + cost / trial.epoch > a.cost_threshold:
                self._stop(StopReason.COST_THRESHOLD)
                return

    def _stop(self, reason: StopReason) -> None:
        a = self.asked
        logger.info("recurrence %d try %d: %s", a.recurrence, a.attempt, reason.description)
        with contextlib.suppress(OSError):
            with open(a.trial_dir / TrialFiles.EVENTS, "a", encoding="utf-8") as f:
                f.write(json.dumps({"event": "stop", "reason": str(reason), "time": time.time()}) + "\n")
            (a.trial_dir / TrialFiles.STOP).touch()
