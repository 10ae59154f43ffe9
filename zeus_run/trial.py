"""Launch one trial of a training script and watch it until it should stop.

The script runs in its own process group with its output streamed, chunk by
chunk, to the trial's log file and to a listener (never held in memory). The
launcher reads each finished epoch's metric (event log or regex), measures
time and energy at every epoch boundary, and stops the trial when the target
is reached, ``max_epochs`` is hit, the cost after the next epoch (predicted
as the last epoch's cost) would exceed the threshold, or already has, the timeout passes, or it is
cancelled. Stopping = create the stop file, SIGTERM the group, SIGKILL after
a grace period.
"""

from __future__ import annotations

import logging
import math
import os
import re
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from zeus_run import _fs
from zeus_run.cost import zeus_cost
from zeus_run.energy import EnergySource
from zeus_run.errors import LaunchError
from zeus_run.events import EpochEvent, EventLogTail, LineSplitter, RegexMetricReader, remove_quietly

logger = logging.getLogger(__name__)

_INTERPRETERS = re.compile(r"^(python[0-9.]*|pypy[0-9.]*|bash|sh|zsh|perl|ruby|node|Rscript)$")
_TICK = 0.05  # unit: s; how often the launcher wakes when the script is silent


@dataclass(frozen=True)
class TrialPlan:
    """Everything needed to launch and judge one trial.

    Attributes:
        argv: Command (placeholders already substituted); one string when ``shell``.
        shell: Run through ``/bin/sh -c``.
        workdir: Working directory.
        env: Complete environment of the script.
        log_path: File that receives the script's stdout and stderr.
        event_path: JSON-lines event log (``ZEUS_EVENT_LOG``).
        stop_path: File created to ask the script to stop (``ZEUS_STOP_FILE``).
        max_epochs: Epoch limit.
        target_metric: Converged when the metric reaches this.
        higher_is_better: Direction of the metric.
        metric_regex: Regex read from the output, or None to read the event log.
        eta: Cost knob.
        cost_threshold: Stop once the cost would exceed this (unit: J; inf: never).
        timeout: Wall-clock limit (unit: s), or None.
        grace: Seconds between SIGTERM and SIGKILL.
        profile_stop_path: Created when power-limit profiling ends (``ZEUS_PROFILE_STOP``), if profiling.
    """

    argv: tuple[str, ...]
    workdir: Path
    env: Mapping[str, str]
    log_path: Path
    event_path: Path
    stop_path: Path
    max_epochs: int
    target_metric: float
    higher_is_better: bool = True
    metric_regex: str | None = None
    eta: float = 0.5
    cost_threshold: float = math.inf
    timeout: float | None = None
    shell: bool = False
    grace: float = 5.0
    profile_stop_path: Path | None = None


@dataclass(frozen=True)
class TrialOutcome:
    """What happened. Time and energy count up to the last epoch boundary the trial was judged at.

    Attributes:
        epochs: Epochs counted.
        time: Unit: s.
        energy: Unit: J.
        max_power: Unit: W.
        cost: Unit: J.
        reached: Target reached.
        stop_reason: See `zeus_run.records.STOP_REASONS`.
        exit_code: Script's exit code (negative: signal), None if it never ran.
        metrics: Metric after each counted epoch.
        message: Explanation for failures (log tail).
        malformed: Malformed event or output lines ignored.
        power_limit: GPU power limit chosen for this trial (unit: W), None if none was.
    """

    epochs: int
    time: float
    energy: float
    max_power: float
    cost: float
    reached: bool
    stop_reason: str
    exit_code: int | None
    metrics: tuple[float, ...] = ()
    message: str | None = None
    malformed: int = 0
    power_limit: float | None = None


class TrialListener(Protocol):
    """Receives live progress of a trial (the CLI renders it)."""

    def on_output(self, line: str) -> None: ...

    def on_epoch(self, epoch: int, metric: float, time: float, energy: float, cost: float) -> None: ...

    def on_tick(self, time: float, energy: float, cost: float) -> None: ...


class NullListener:
    """Ignores everything."""

    def on_output(self, line: str) -> None:
        pass

    def on_epoch(self, epoch: int, metric: float, time: float, energy: float, cost: float) -> None:
        pass

    def on_tick(self, time: float, energy: float, cost: float) -> None:
        pass


def preflight(argv: tuple[str, ...], workdir: Path, env: Mapping[str, str], shell: bool) -> None:
    """Check the command can start at all, before any trial is recorded.

    Raises:
        LaunchError: The program is missing or not executable, or the script
            given to an interpreter (``python train.py``) does not exist.
    """
    if not workdir.is_dir():
        raise LaunchError(f"Working directory {str(workdir)!r} does not exist. Fix `workdir` in the job spec.")
    if shell:
        return
    prog = argv[0]
    if "/" in prog:
        path = Path(prog) if os.path.isabs(prog) else workdir / prog
        if not path.is_file():
            raise LaunchError(
                f"Training command {prog!r} does not exist (looked in {str(workdir)!r}). Fix `command` in the job spec."
            )
        if not os.access(path, os.X_OK):
            raise LaunchError(
                f"Training command {prog!r} is not executable. Run `chmod +x {prog}` or prefix the interpreter in `command`."
            )
    elif shutil.which(prog, path=env.get("PATH", os.defpath)) is None:
        raise LaunchError(
            f"Training command {prog!r} was not found on PATH. Install it or give its full path in `command`."
        )
    if _INTERPRETERS.match(os.path.basename(prog)):
        script = _script_argument(argv[1:])
        if script is not None:
            path = Path(script) if os.path.isabs(script) else workdir / script
            if not path.exists():
                raise LaunchError(
                    f"Training script {script!r} does not exist (looked in {str(workdir)!r}). "
                    "Fix `command` or `workdir` in the job spec (relative paths start at the spec file's folder)."
                )


def _script_argument(args: tuple[str, ...]) -> str | None:
    for a in args:
        if a in ("-m", "-c", "-e"):
            return None
        if a.startswith("-"):
            continue
        return a
    return None


class TrialProfiler(Protocol):
    """What the launcher needs from a power-limit profiler (see `zeus_run.power.JitProfiler`)."""

    done: bool
    chosen: float | None

    def start(self) -> None: ...

    def on_iters_per_epoch(self, iters: int) -> None: ...

    def observe(self, steps: int, script_time: float | None, time: float, energy: float) -> None: ...

    def abandon(self, why: str) -> None: ...

    def account(self, time: float, energy: float) -> tuple[float, float]: ...


@dataclass
class _Meter:
    energy: EnergySource
    eta: float
    profiler: TrialProfiler | None = None
    t0: float = field(default_factory=time.monotonic)
    e0: float = 0.0

    def __post_init__(self) -> None:
        self.e0 = self.energy.read()

    def raw(self) -> tuple[float, float]:
        """Time (s) and energy (J) measured since the start."""
        return time.monotonic() - self.t0, max(self.energy.read() - self.e0, 0.0)

    def now(self) -> tuple[float, float, float]:
        """Time, energy and cost counted (observer mode accounts as if at the chosen limit)."""
        t, e = self.raw()
        if self.profiler is not None:
            t, e = self.profiler.account(t, e)
        return t, e, zeus_cost(e, t, self.eta, self.energy.max_power)


def run_trial(
    plan: TrialPlan,
    energy: EnergySource,
    listener: TrialListener | None = None,
    cancel: threading.Event | None = None,
    profiler: TrialProfiler | None = None,
) -> TrialOutcome:
    """Run one trial to its end. See the module docstring for when it stops.

    Args:
        plan: What to run and how to judge it.
        energy: Source of energy readings (shared across trials).
        listener: Receives output lines and epoch progress.
        cancel: When set, the trial is stopped and reported as ``interrupted``.
        profiler: Power-limit profiler fed with the script's step counts and energy
            readings at every poll; the caller restores the GPUs' limits afterwards.

    Raises:
        LaunchError: The command could not be started.
    """
    return _TrialRun(plan, energy, listener or NullListener(), cancel or threading.Event(), profiler).run()


class _TrialRun:
    def __init__(
        self,
        plan: TrialPlan,
        energy: EnergySource,
        listener: TrialListener,
        cancel: threading.Event,
        profiler: TrialProfiler | None = None,
    ) -> None:
        self.plan = plan
        self.profiler = profiler
        self.energy = energy
        self.listener = listener
        self.cancel = cancel
        self.metrics: list[float] = []
        self.reached = False
        self.stop_reason: str | None = None
        self.counted: tuple[float, float, float] | None = None  # (time, energy, cost) at the judged boundary
        self.prev_cost = 0.0  # cost at the previous epoch boundary
        self.tail = EventLogTail(str(plan.event_path)) if plan.metric_regex is None else None
        self.regex = RegexMetricReader(plan.metric_regex) if plan.metric_regex is not None else None
        self.splitter = LineSplitter()
        # Step counts come from the event log even when the metric is read by regex.
        self.steps_tail = self.tail if self.tail is not None or profiler is None else EventLogTail(str(plan.event_path))
        self._profile_signalled = False

    # -- judging ---------------------------------------------------------------------
    def _on_epoch(self, ev: EpochEvent, meter: _Meter) -> None:
        if self.stop_reason is not None:
            return  # already decided; later epochs are not counted
        t, e, c = meter.now()
        self.metrics.append(ev.metric)
        epochs = len(self.metrics)
        self.listener.on_epoch(epochs, ev.metric, t, e, c)
        p = self.plan
        hit = ev.metric >= p.target_metric if p.higher_is_better else ev.metric <= p.target_metric
        if (
            self.profiler is not None
            and not self.profiler.done
            and self.steps_tail is not None
            and self.steps_tail.steps == 0
        ):
            self.profiler.abandon(
                "an epoch ended without step counts from the script; call trial.step() every iteration "
                "(or iterate with trial.iterate(loader)) to enable power-limit profiling"
            )
        if hit:
            self.reached = True
            self._decide("target_reached", (t, e, c))
        elif epochs >= p.max_epochs:
            self._decide("max_epochs", (t, e, c))
        elif epochs >= 2 and c + (c - self.prev_cost) > p.cost_threshold:
            # Predict the next epoch to cost what the last one did. Epoch 1 also
            # carries start-up (imports, data loading), so it predicts nothing;
            # the hard cut in `_watch` still stops a trial whose cost crosses
            # the threshold mid-epoch.
            self._decide("cost_threshold", (t, e, c))
        self.prev_cost = c

    def _decide(self, reason: str, at: tuple[float, float, float]) -> None:
        self.stop_reason = reason
        self.counted = at
        logger.debug("trial stop decided: %s at %s", reason, at)

    def _handle_lines(self, lines: list[bytes], meter: _Meter) -> None:
        for line in lines:
            self.listener.on_output(line.decode("utf-8", "replace")[:4096])
            if self.regex is not None:
                for ev in self.regex.feed_line(line):
                    self._on_epoch(ev, meter)

    # -- the process -----------------------------------------------------------------
    def run(self) -> TrialOutcome:
        p = self.plan
        preflight(p.argv, p.workdir, p.env, p.shell)
        for path in (p.event_path, p.stop_path, p.profile_stop_path):
            if path is not None:
                remove_quietly(str(path))
        p.log_path.parent.mkdir(parents=True, exist_ok=True)
        with _fs.open_append(p.log_path) as log:
            if self.profiler is not None:
                self.profiler.start()
            meter = _Meter(self.energy, p.eta, self.profiler)
            try:
                proc = subprocess.Popen(
                    p.argv[0] if p.shell else list(p.argv),
                    shell=p.shell,
                    cwd=str(p.workdir),
                    env=dict(p.env),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    bufsize=0,
                )
            except OSError as exc:
                raise LaunchError(f"Could not start {p.argv[0]!r}: {exc}. Fix `command` in the job spec.") from exc
            try:
                exit_code = self._watch(proc, log, meter)
            finally:
                _kill_group(proc, p.grace, p.stop_path)  # no-op if already gone
            end = meter.now()
        return self._outcome(exit_code, end)

    def _watch(self, proc: subprocess.Popen, log, meter: _Meter) -> int | None:
        p = self.plan
        fd = proc.stdout.fileno()
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        eof = False
        try:
            while True:
                if not eof:
                    if sel.select(timeout=_TICK):
                        chunk = os.read(fd, 65536)
                        if chunk:
                            log.write(chunk)
                            log.flush()
                            self._handle_lines(self.splitter.feed(chunk), meter)
                        else:
                            eof = True
                            sel.unregister(fd)
                else:
                    try:
                        proc.wait(timeout=_TICK)
                    except subprocess.TimeoutExpired:
                        pass
                if self.tail is not None:
                    for ev in self.tail.poll():
                        self._on_epoch(ev, meter)
                elif self.steps_tail is not None:
                    self.steps_tail.poll()
                self._feed_profiler(meter)
                if self.stop_reason is not None:
                    return self._stop(proc, log, meter)
                t, e, c = meter.now()
                self.listener.on_tick(t, e, c)
                if self.cancel.is_set():
                    self._decide("interrupted", (t, e, c))
                    return self._stop(proc, log, meter)
                if p.timeout is not None and t > p.timeout:
                    self._decide("timeout", (t, e, c))
                    return self._stop(proc, log, meter)
                if c > p.cost_threshold:
                    self._decide("cost_threshold", (t, e, c))
                    return self._stop(proc, log, meter)
                if eof and proc.poll() is not None:
                    break
            # The script ended by itself: collect its last words.
            self._handle_lines(self.splitter.flush(), meter)
            if self.tail is not None:
                for ev in self.tail.finish():
                    self._on_epoch(ev, meter)
            return proc.returncode
        finally:
            sel.close()

    def _feed_profiler(self, meter: _Meter) -> None:
        prof, tail = self.profiler, self.steps_tail
        if prof is None or tail is None:
            return
        if not prof.done:
            if tail.iters_per_epoch:
                prof.on_iters_per_epoch(tail.iters_per_epoch)
            if tail.steps > 0:
                t, e = meter.raw()
                prof.observe(tail.steps, tail.step_time, t, e)
        if prof.done and not self._profile_signalled:
            self._profile_signalled = True
            if self.plan.profile_stop_path is not None:
                _fs.touch(self.plan.profile_stop_path)

    def _stop(self, proc: subprocess.Popen, log, meter: _Meter) -> int | None:
        code = _kill_group(proc, self.plan.grace, self.plan.stop_path)
        # Drain what is left of the output (the group is gone, so EOF comes quickly).
        fd = proc.stdout.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            log.write(chunk)
            for line in self.splitter.feed(chunk):
                self.listener.on_output(line.decode("utf-8", "replace")[:4096])
        log.flush()
        return code

    def _outcome(self, exit_code: int | None, end: tuple[float, float, float]) -> TrialOutcome:
        reason = self.stop_reason
        t, e, c = self.counted if self.counted is not None else end
        message = None
        if reason is None:
            if self.reached:
                reason = "target_reached"
            elif exit_code == 0:
                reason = "exited"
                message = f"the script exited after {len(self.metrics)} epoch(s) without reaching the target"
            else:
                reason = "crashed"
                message = f"exit code {exit_code}; last output:\n{_tail(self.plan.log_path)}"
        malformed = (self.tail.malformed if self.tail else 0) + (self.regex.malformed if self.regex else 0)
        if malformed:
            logger.warning("ignored %d malformed metric line(s) from the script", malformed)
        if self.splitter.overlong:
            logger.info(
                "%d output line(s) longer than 64 KiB were cut in the live view (the log has them whole)",
                self.splitter.overlong,
            )
        if reason == "timeout":
            message = f"no result within the {self.plan.timeout:g} s timeout"
        return TrialOutcome(
            epochs=len(self.metrics),
            time=t,
            energy=e,
            max_power=self.energy.max_power,
            cost=c,
            reached=self.reached,
            stop_reason=reason,
            exit_code=exit_code,
            metrics=tuple(self.metrics),
            message=message,
            malformed=malformed,
            power_limit=self.profiler.chosen if self.profiler is not None else None,
        )


def _kill_group(proc: subprocess.Popen, grace: float, stop_path: Path) -> int | None:
    """Ask the process group to stop, then force it. Returns the exit code."""
    if proc.poll() is not None:
        _signal_group(proc.pid, signal.SIGKILL)  # stragglers in the group, if any
        return proc.returncode
    _fs.touch(stop_path)
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        logger.warning("training script (pid %d) ignored SIGTERM for %.1f s; sending SIGKILL", proc.pid, grace)
        _signal_group(proc.pid, signal.SIGKILL)
        return proc.wait()
    finally:
        _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path, limit: int = 1500) -> str:
    try:
        with _fs.open_read(path) as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(size - limit, 0))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return "(no log)"
