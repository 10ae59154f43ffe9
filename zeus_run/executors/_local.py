"""The local executor: each trial is a subprocess of the launcher, watched by the agent's code in-process.

A launcher that dies leaves its trials' scripts without a watcher: a relaunched
launcher kills them (`LocalExecutor.recover`), except that a trial whose
outcome was already written (the launcher died between the trial's end and its
record) is adopted: its record is made from that outcome, and it is not run again.
So is a trial whose script went on without the launcher, reached the target and
exited (`zeus_run.trial.orphan`): its record is made from its event log (or, where
its metric is read from its output, from the output log the relay kept writing), its
energy imputed and said to be.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Any

from zeus_run import _fs
from zeus_run.contract import Env, RunningMarker, StopReason, TrialFiles, TrialOutcome
from zeus_run.energy import EnergySource, EstimatedEnergy, NvmlEnergy, gpu_source, open_energy_source
from zeus_run.engine.concurrent import slot_devices
from zeus_run.engine.core import TrialRequest
from zeus_run.engine.record import Measurement
from zeus_run.errors import EnergyError, LaunchEnvironmentError, LaunchError, RunDirError
from zeus_run.executors._base import PreparedTrial, RealExecutor, prepare, to_record
from zeus_run.executors.kept import kept_model
from zeus_run.optimizer.power_limit import recurrences_left
from zeus_run.power import PowerSession
from zeus_run.records import TrialRecord
from zeus_run.rundir.ranout import ran_out
from zeus_run.rundir.settings import read_settings
from zeus_run.rundir.store import check_writable
from zeus_run.trial.agent import read_outcome, run_agent
from zeus_run.trial.launch import launch_error
from zeus_run.trial.metric_regex import BoundedRegex, output_reader
from zeus_run.trial.orphan import finished_orphan, finished_orphan_output
from zeus_run.trial.proctree import ProcessTree
from zeus_run.trial.run import preflight, trial_environment

logger = logging.getLogger(__name__)


class LocalExecutor(RealExecutor):
    """Runs each trial on this machine, measured with the run's energy source.

    The agent's code (`zeus_run.trial.agent.run_agent`) runs in the launcher's own
    process: no extra interpreter start per trial, and the power-limit
    session (which holds NVML) stays with the launcher.
    """

    kind = "local"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots: dict[int, tuple[EnergySource, dict[str, str]]] = {}
        self._slots_lock = threading.Lock()
        self._slot_power: dict[int, PowerSession] = {}  # each slot controls only its own GPUs
        #: Trials `recover` adopted (their outcome is written), by ``trial``.
        self._adopt = {m.trial: m for m in self.rd.running_trials() or [] if (m.executor or self.kind) == self.kind}
        self._adopt_lock = threading.Lock()
        #: Whether the history's last record was looked at for a model a spec error kept (`zeus_run.executors.kept`).
        self._kept_checked = False

    def __call__(self, req: TrialRequest) -> TrialRecord:
        return self.run_on_slot(req, 0)

    def slot(self, slot: int) -> tuple[EnergySource, dict[str, str]]:
        """Slot ``slot``'s energy source and environment (``concurrency: N`` runs N trials at once).

        With one slot: the run's energy source, the environment as it is. With N:
        the visible GPUs are split into N groups (``len(gpus) // N`` each; slot k gets
        group k, passed as ``CUDA_VISIBLE_DEVICES``) and each slot measures its own;
        without GPUs each slot is a CPU slot with an estimate of its own (the estimate
        charges each trial's own processes).

        Raises:
            EnergyError: There are fewer GPUs than slots.
        """
        if self.spec.concurrency == 1:
            return self.energy, {}
        with self._slots_lock:
            if slot not in self._slots:
                self._slots[slot] = self._open_slot(slot)
            return self._slots[slot]

    def _open_slot(self, slot: int) -> tuple[EnergySource, dict[str, str]]:
        n = self.spec.concurrency
        gpus = gpu_source(self.energy)  # RAPL's whole-machine counters cannot be split by slot
        if gpus is not None:
            ids = [g.index for g in gpus.gpus]
            if len(ids) < n:
                raise EnergyError(
                    f"concurrency: {n} needs at least {n} GPUs (one slot each), but {len(ids)} are visible "
                    f"({', '.join(ids)}); lower concurrency, or set energy.gpus / CUDA_VISIBLE_DEVICES"
                )
            group = list(slot_devices(slot, ids, len(ids) // n))
            source: EnergySource = NvmlEnergy(group, nvml=gpus.nvml)
            visible = [d.get("uuid") or d["index"] for d in source.devices()]
            return source, {"CUDA_VISIBLE_DEVICES": ",".join(visible)}
        if isinstance(self.energy, EstimatedEnergy):
            return EstimatedEnergy(self.energy.watts, basis=self.energy.basis), {}
        return open_energy_source(dataclasses.replace(self.spec.energy, source="estimate")), {}

    def power_for(self, slot: int, energy: EnergySource) -> PowerSession | None:
        """The power session of slot ``slot``: the run's with one slot, else one over the slot's GPUs only."""
        if self.power is None or self.spec.concurrency == 1:
            return self.power
        gpus = gpu_source(energy)
        if gpus is None:
            return None
        with self._slots_lock:
            if slot not in self._slot_power:
                self._slot_power[slot] = self.power.for_gpus(gpus)
            return self._slot_power[slot]

    def close(self) -> None:
        with self._adopt_lock:
            for old in self._adopt.values():  # adopted but never asked for again
                self.rd.clear_running(old.trial)
            self._adopt.clear()
        with self._slots_lock:
            for power in self._slot_power.values():
                power.controller.restore()
            for source, _ in self._slots.values():
                if source is not self.energy:
                    source.close()
            self._slots.clear()
        super().close()

    def run_on_slot(self, req: TrialRequest, slot: int) -> TrialRecord:
        """Run one trial to its end on slot ``slot`` (see `slot`); its record (not yet persisted)."""
        energy, extra_env = self.slot(slot)
        with self._adopt_lock:
            old = self._adopt.pop(req.trial, None)
        if old is not None:
            record = self._adopted(req, old, energy)
            if record is not None:
                return record
        if not self._kept_checked:
            self._kept_checked = True
            record = self._kept(req, energy)
            if record is not None:
                return record
        bs = req.decision.batch_size
        power = self.power_for(slot, energy)
        profiler = (
            power.profiler_for(bs, recurrences_left(req.recurrence, req.horizon, req.lifetime))
            if power is not None
            else None
        )
        try:  # nothing started yet: out of a resource here, it leaves no marker and uses no try
            prepared = prepare(self.spec, self.rd, req, energy, profiler is not None and not profiler.done, extra_env)
            if self.spec.concurrency > 1:
                prepared = dataclasses.replace(prepared, running=dataclasses.replace(prepared.running, slot=slot))
            plan = prepared.plan.trial
            preflight(plan.argv, plan.workdir, trial_environment(plan.env), plan.shell)
            check_writable(self.rd.path)
            self.rd.mark_running(prepared.running)
        except (OSError, RunDirError) as exc:  # too many open files, no memory, disk full
            short = ran_out(exc)
            if short is None:
                raise
            self._forget(req.trial)
            raise launch_error(self.spec.command[0], short) from exc
        invalid_before = energy.invalid_windows
        try:
            self.listener.on_trial_start(req, prepared.learning_rate, prepared.plan.dir)
            out = run_agent(prepared.plan, energy, self.listener, self.cancel, profiler, heartbeat=False)
        except (LaunchError, LaunchEnvironmentError):
            self._forget(req.trial)  # nothing started: no try of the recurrence was used
            raise
        finally:
            if power is not None:
                power.controller.restore()  # each of its GPUs' original limit and persistence mode
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
        record = to_record(self.spec, self.rd, req, prepared, out, Measurement.of(energy), message, self.provenance)
        self.burst.check(record)
        return record

    def _forget(self, trial: int) -> None:
        """Drop the marker of a trial that never started (its write may fail too, out of file descriptors: it is
        then dropped at the next write of ``running.json``)."""
        try:
            self.rd.clear_running(trial)
        except (OSError, RunDirError) as exc:
            logger.warning("could not remove trial %d from running.json yet: %s", trial, exc)

    def _adopted(self, req: TrialRequest, old: RunningMarker, energy: EnergySource) -> TrialRecord | None:
        """The record of an adopted trial from its written outcome, or from the event log of a script that
        reached the target while no launcher watched it (None: it is not the trial asked for now)."""
        prepared = prepare(self.spec, self.rd, req, energy, False)
        differ = old.differences(prepared.running)
        outcome = read_outcome(prepared.plan.dir)
        if outcome is None and not differ:
            return self._orphan(req, old, prepared)
        if differ or outcome is None:
            logger.warning(
                "the previous launcher's trial %d is not the one asked for now (%s); it runs again",
                old.trial,
                ", ".join(differ) or "its outcome is gone",
            )
            return None
        kept = {k: getattr(old, k) for k in ("started_at", "token") if getattr(old, k) is not None}
        prepared = dataclasses.replace(prepared, running=dataclasses.replace(prepared.running, **kept))
        self.listener.on_trial_start(req, prepared.learning_rate, prepared.plan.dir)
        logger.info("recurrence %d try %d: taken over from its outcome", req.recurrence, req.attempt)
        message = _prepend("taken over from a launcher that died after it ended", outcome.message)
        record = to_record(self.spec, self.rd, req, prepared, outcome, Measurement.of(energy), message, self.provenance)
        self.burst.check(record)
        return record

    def _kept(self, req: TrialRequest, energy: EnergySource) -> TrialRecord | None:
        """The record of the try that follows a spec error whose script reached the target all the same (its log
        read again under the fixed spec: `zeus_run.executors.kept`), where it is the same decision; None otherwise."""
        kept = kept_model(list(self.rd.history.read(warn=False)), self.spec, self.rd.path)
        if kept is None:
            return None
        last = kept.record
        if (last.recurrence, last.attempt + 1, last.batch_size) != (
            req.recurrence,
            req.attempt,
            req.decision.batch_size,
        ):
            return None
        prepared = prepare(self.spec, self.rd, req, energy, False)
        note = (
            f"taken over from the output of try {last.attempt}, whose metric the spec could not read then (a spec "
            f"error, fixed since): its script reached the target after {len(kept.metrics)} epoch(s) and saved its "
            "model; its whole process is charged as it was measured, to its exit"
        )
        outcome = TrialOutcome.of(
            StopReason.TARGET_REACHED,
            epochs=len(kept.metrics),
            time=last.time,
            energy=last.energy,
            max_power=last.max_power,
            cost=last.cost,
            exit_code=last.exit_code,
            metrics=kept.metrics,
            after_metrics=kept.after_metrics or None,
            message=note,
            cause=None,
        )
        self.listener.on_trial_start(req, prepared.learning_rate, prepared.plan.dir)
        logger.info(
            "recurrence %d try %d: taken over from try %d's output, which reached the target (its metric was "
            "unreadable under the spec then)",
            req.recurrence,
            req.attempt,
            last.attempt,
        )
        record = to_record(self.spec, self.rd, req, prepared, outcome, Measurement.of(energy), note, self.provenance)
        return dataclasses.replace(
            record,
            energy_source=last.energy_source,
            estimated=last.estimated,
            energy_method=last.energy_method,
            started_at=last.started_at,
            ended_at=last.ended_at,
            log=last.log,
        )

    def _orphan(self, req: TrialRequest, old: RunningMarker, prepared: PreparedTrial) -> TrialRecord | None:
        """The record of a trial whose script reached the target while no launcher watched it, from its event
        log (`zeus_run.trial.orphan`); None if the log does not show that (it runs again)."""
        from zeus_run.engine.measure import PowerBasis  # imputes as a tell without a measurement does

        plan = prepared.plan.trial
        reader = output_reader(plan.metric_regex, plan.metric_key) if plan.metric_path is None else None
        source = "its event log" if reader is None else "its output log"
        if reader is None:
            run = finished_orphan(
                plan.event_path, plan.target_metric, plan.higher_is_better, plan.max_epochs, old.started_at
            )
        else:
            run = finished_orphan_output(
                plan.log_path.parent, reader, plan.target_metric, plan.higher_is_better, plan.max_epochs, old.started_at
            )
        if run is None:
            logger.warning("the previous launcher's trial %d left no outcome; it runs again", old.trial)
            return None
        basis = PowerBasis.of(self.rd.history.read(warn=False))
        energy, how, max_power = basis.impute(req.decision.batch_size, run.time, self.spec.energy.watts)
        note = (
            f"taken over from {source}: the launcher died during this trial, and the script reached the target "
            f"after {len(run.metrics)} epoch(s) and exited; time from its launch to that epoch, energy not measured "
            f"({'imputed from the job' + chr(39) + 's measured trials' if how.method == 'imputed' else how.method})"
        )
        outcome = TrialOutcome.of(
            StopReason.TARGET_REACHED,
            epochs=len(run.metrics),
            time=run.time,
            energy=energy,
            max_power=max_power,
            eta=self.spec.eta,
            after_time=run.after_time,
            after_energy=basis.impute(req.decision.batch_size, run.after_time, self.spec.energy.watts)[0],
            metrics=run.metrics,
            after_metrics=run.after_metrics or None,
            message=note,
            cause=None,
        )
        kept = {k: getattr(old, k) for k in ("started_at", "token") if getattr(old, k) is not None}
        prepared = dataclasses.replace(prepared, running=dataclasses.replace(prepared.running, **kept))
        self.listener.on_trial_start(req, prepared.learning_rate, prepared.plan.dir)
        logger.info(
            "recurrence %d try %d: reached the target after %d epoch(s) while no launcher watched it; taken over "
            "from %s",
            req.recurrence,
            req.attempt,
            len(run.metrics),
            source,
        )
        return to_record(self.spec, self.rd, req, prepared, outcome, how, note, self.provenance)

    @staticmethod
    def recover(infos: list[RunningMarker], may_adopt: bool = True) -> set[int]:
        """Kill the processes of the trials a dead launcher left behind (found by their trial tokens);
        adopt each one whose outcome is written, and each one whose script went on, reached the target
        and exited (its event log shows so: `zeus_run.trial.orphan`).

        The script runs in its own session, so it outlives a launcher killed with
        SIGKILL; `zeus_run.trial.proctree` finds every process carrying the token. A trial
        still running cannot be adopted: its watcher died with its launcher.
        """
        adopted: set[int] = set()
        for info in infos:
            if info.token:
                tree = ProcessTree(info.token)
            elif info.event_log:  # written by a launcher from before trial tokens
                tree = ProcessTree(info.event_log, variable=Env.EVENT_LOG)
            else:
                continue
            exited = not tree.members()
            killed = tree.sweep()
            if killed:
                logger.warning("killed %d training process(es) left running by the previous launcher", len(set(killed)))
                if info.trial_dir:  # where its span ends (its record charges it: energy spent always counts)
                    with contextlib.suppress(OSError):
                        _fs.atomic_write(Path(info.trial_dir) / TrialFiles.KILLED, f"{time.time():.3f}\n")
            if may_adopt and exited and info.trial_dir and _reached_alone(info):
                adopted.add(info.trial)
        for info in infos:
            if may_adopt and info.trial_dir and read_outcome(Path(info.trial_dir)) is not None:
                adopted.add(info.trial)
        return adopted


def _reached_alone(info: RunningMarker) -> bool:
    """Whether the event log of a trial whose launcher died shows that its script reached the job's target
    (read from the run directory's ``spec.yaml``: the launcher that adopts it runs under the same)."""
    assert info.trial_dir is not None
    trial_dir = Path(info.trial_dir)
    try:
        job = read_settings(trial_dir.parent.parent) or {}
    except RunDirError:
        return False
    target, higher, limit = job.get("target_metric"), job.get("higher_is_better", True), job.get("max_epochs")
    if not isinstance(target, (int, float)) or not isinstance(higher, bool) or not isinstance(limit, int):
        return False
    reader = _output_reader(job.get("metric"))
    if reader is not None:
        return finished_orphan_output(trial_dir, reader, float(target), higher, limit, info.started_at) is not None
    return finished_orphan(trial_dir / TrialFiles.EVENTS, float(target), higher, limit, info.started_at) is not None


def _output_reader(metric: object) -> BoundedRegex | None:
    """The reader of the stored spec's ``metric`` section where it reads the script's output (None: elsewhere)."""
    if not isinstance(metric, dict) or metric.get("path") is not None:
        return None
    source, regex, key = metric.get("source"), metric.get("regex"), metric.get("key")
    if source == "jsonl" and isinstance(key, str):
        return output_reader(None, key)
    if source == "regex" and isinstance(regex, str):
        return output_reader(regex, None)
    return None


def _prepend(note: str, message: str | None) -> str:
    return note if message is None else f"{note}; {message}"
