"""Launch one trial of a training script, watch it, and stop it gracefully.

A self-contained unit: a plain-data `TrialPlan` in, a plain-data
`TrialOutcome` out (both convert to and from JSON), so the same code can run
in the launcher or in an agent beside the script. It needs only an energy
source (and, optionally, a power-limit profiler) from its caller.

The script runs in a session of its own, its environment marked with the
trial's token (`zeus_run.trial.proctree`). Its output is streamed, chunk by chunk and
never blocking, to the trial's log file and to a listener. The launcher reads
each finished epoch's metric (event log or regex), measures time and energy
at every epoch boundary, and decides to stop the trial when the target is
reached, ``max_epochs`` is hit, the cost after the next epoch (predicted as
the last epoch's cost) would exceed the threshold or already has, the timeout
passes, or it is cancelled. Cost is counted up to that decision.

The stop protocol (README, "Stopping a trial"):

1. create the stop file (``ZEUS_STOP_FILE``);
2. wait for the script to exit by itself: ``stop_grace`` seconds after the
   target or ``max_epochs`` (a *finishing* stop: the script saves its model),
   ``term_grace`` seconds after an early stop, a timeout or a cancel (a
   *prompt* stop); in regex mode ``on_target: stop`` makes the target a prompt
   stop too;
3. SIGTERM to every process of the trial; 4. SIGKILL after ``kill_grace``.

Time and energy from the decision to the script's exit are recorded apart
(``after_time``, ``after_energy``). When the script's main process has exited,
every process it left behind is killed, its output is drained for at most
`DRAIN_TIME` seconds, and the trial is over.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import shlex
import signal
import subprocess
import threading
import time
from typing import Protocol

from zeus_run import _fs
from zeus_run.contract import Env, StopReason, TrialOutcome, TrialPlan, crash_cause
from zeus_run.energy import EnergySource
from zeus_run.errors import LaunchError
from zeus_run.trial.events import EpochEvent, EventLogTail, LineSplitter, remove_quietly
from zeus_run.trial.launch import preflight, trial_environment
from zeus_run.trial.log import TrialLog, log_tail
from zeus_run.trial.meter import Meter
from zeus_run.trial.metric_regex import REGEX_LINE_LIMIT, BoundedRegex
from zeus_run.trial.proctree import ProcessTree

logger = logging.getLogger(__name__)

_TICK = 0.05  # unit: s; how often the launcher wakes when the script is silent
_READ_CHUNK = 65536
_READS_PER_TICK = 16  # at most 1 MiB of output per tick, so a flood cannot starve the stop rules

#: Seconds to read a script's remaining output after its main process exited.
DRAIN_TIME = 2.0


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


class TrialProfiler(Protocol):
    """What the launcher needs from a power-limit profiler (see `zeus_run.power.JitProfiler`)."""

    done: bool
    chosen: float | None

    def start(self) -> None: ...

    def on_iters_per_epoch(self, iters: int) -> None: ...

    def observe(self, steps: int, script_time: float | None, time: float, energy: float) -> None: ...

    def abandon(self, why: str) -> None: ...

    def account(self, time: float, energy: float) -> tuple[float, float]: ...


def run_trial(
    plan: TrialPlan,
    energy: EnergySource,
    listener: TrialListener | None = None,
    cancel: threading.Event | None = None,
    profiler: TrialProfiler | None = None,
) -> TrialOutcome:
    """Run one trial to its end. See the module docstring for when and how it stops.

    Args:
        plan: What to run and how to judge and stop it.
        energy: Source of energy readings (shared across trials).
        listener: Receives output lines and epoch progress.
        cancel: When set, the trial is stopped promptly and reported as ``interrupted``.
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
        self.stop_reason: StopReason | None = None
        self.counted: tuple[float, float, float] | None = None  # (time, energy, cost) at the judged boundary
        self.prev_cost = 0.0  # cost at the previous epoch boundary
        self.tail = EventLogTail(str(plan.event_path)) if plan.metric_regex is None else None
        self.regex = BoundedRegex(plan.metric_regex) if plan.metric_regex is not None else None
        self.splitter = LineSplitter()
        # Step counts come from the event log even when the metric is read by regex.
        self.steps_tail = self.tail if self.tail is not None or profiler is None else EventLogTail(str(plan.event_path))
        self._profile_signalled = False
        self.notes: list[str] = []
        # The stop sequence: when SIGTERM and SIGKILL are due (monotonic; None: not scheduled).
        self.stopping = False
        self.prompt = False
        self.term_at: float | None = None
        self.kill_at: float | None = None
        self.sent = ""  # "", "sigterm" or "killed"

    # -- judging ---------------------------------------------------------------------
    def _on_epoch(self, ev: EpochEvent, meter: Meter) -> None:
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
            self._decide(StopReason.TARGET_REACHED, (t, e, c))
        elif epochs >= p.max_epochs:
            self._decide(StopReason.MAX_EPOCHS, (t, e, c))
        elif epochs >= 2 and c + (c - self.prev_cost) > p.cost_threshold:
            # Predict the next epoch to cost what the last one did. Epoch 1 also
            # carries start-up (imports, data loading), so it predicts nothing;
            # the hard cut in `_judge` still stops a trial whose cost crosses
            # the threshold mid-epoch.
            self._decide(StopReason.COST_THRESHOLD, (t, e, c))
        elif p.curve_stop and self._cannot_reach(c):
            self._decide(StopReason.NO_PROGRESS, (t, e, c))
        self.prev_cost = c

    def _cannot_reach(self, cost: float) -> bool:
        """Whether the learning curve so far cannot reach the target in time (a probe's ``curve_stop``)."""
        from zeus_run.optimizer.early_stop import cannot_reach  # here: the optimizer package imports numpy

        p, higher = self.plan, self.plan.higher_is_better
        return cannot_reach(
            self.metrics, p.target_metric, p.max_epochs, higher_is_better=higher, cost=cost, threshold=p.cost_threshold
        )

    def _decide(self, reason: StopReason, at: tuple[float, float, float]) -> None:
        self.stop_reason = reason
        self.counted = at
        logger.debug("trial stop decided: %s at %s", reason, at)

    def _handle_lines(self, lines: list[bytes], meter: Meter) -> None:
        for line in lines:
            self.listener.on_output(line.decode("utf-8", "replace")[:4096])
            if self.regex is not None:
                for ev in self.regex.feed_line(line):
                    self._on_epoch(ev, meter)
        if self.regex is not None:
            self.regex.check_progress()

    # -- the process -----------------------------------------------------------------
    def run(self) -> TrialOutcome:
        p = self.plan
        env = trial_environment(p.env, p.token)
        preflight(p.argv, p.workdir, env, p.shell)
        for path in (p.event_path, p.stop_path, p.profile_stop_path):
            if path is not None and os.path.lexists(path):  # left by an earlier attempt
                remove_quietly(str(path))
        logger.debug(
            "launching %s (in %s); environment additions: %s",
            p.argv[0] if p.shell else shlex.join(p.argv),
            p.workdir,
            " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(p.env.items()))
            + (f" {Env.TRIAL_TOKEN}={p.token}" if p.token else ""),
        )
        log = TrialLog(p.log_path)
        tree = ProcessTree(p.token) if p.token else None
        if tree is not None:
            self.energy.track(tree.cpu_seconds)
        try:
            if self.profiler is not None:
                self.profiler.start()
            meter = Meter(self.energy, p.eta, self.profiler)
            try:
                proc = subprocess.Popen(
                    p.argv[0] if p.shell else list(p.argv),
                    shell=p.shell,
                    cwd=str(p.workdir),
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    bufsize=0,
                )
            except OSError as exc:
                raise LaunchError(f"Could not start {p.argv[0]!r}: {exc}. Fix `command` in the job spec.") from exc
            if tree is None:
                tree = ProcessTree("", proc.pid)  # the process group only
            tree.attach(proc.pid)
            try:
                with self.regex if self.regex is not None else contextlib.nullcontext():
                    exit_code, end = self._watch(proc, log, meter, tree)
            finally:
                if proc.poll() is None:  # an error in the launcher itself: leave nothing behind
                    tree.sweep()
                    proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()
        finally:
            self.energy.track(None)
            log.close()
        if log.error:
            self.notes.append(log.error)
        return self._outcome(exit_code, end)

    def _watch(
        self, proc: subprocess.Popen, log: TrialLog, meter: Meter, tree: ProcessTree
    ) -> tuple[int, tuple[float, float, float]]:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        eof = False
        try:
            while True:
                if not eof:
                    if sel.select(timeout=_TICK):
                        eof = self._pump(fd, log, meter)
                        if eof:
                            sel.unregister(fd)
                else:
                    try:
                        proc.wait(timeout=_TICK)
                    except subprocess.TimeoutExpired:
                        pass
                self._poll_events(meter)
                self._feed_profiler(meter)
                if proc.poll() is not None:
                    break
                self._judge(meter, tree)
            # The main process exited (by itself or stopped): this is the end of the trial.
            end = meter.freeze()
            left = tree.sweep()  # whatever it left behind (daemons, children holding the output open)
            if left:
                logger.info("killed %d process(es) the script left running: %s", len(set(left)), sorted(set(left)))
            if not eof:
                self._drain(fd, sel, log, meter)
            self._handle_lines(self.splitter.flush(), meter)
            if self.tail is not None:
                for ev in self.tail.finish():
                    self._on_epoch(ev, meter)
            return proc.returncode, end
        finally:
            sel.close()

    def _pump(self, fd: int, log: TrialLog, meter: Meter) -> bool:
        """Read what output is there (bounded). Returns True at end of file."""
        for _ in range(_READS_PER_TICK):
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                return False
            except OSError:
                return True
            if not chunk:
                return True
            log.write(chunk)
            self._handle_lines(self.splitter.feed(chunk), meter)
        return False

    def _drain(self, fd: int, sel: selectors.BaseSelector, log: TrialLog, meter: Meter) -> None:
        """Read the output left in the pipe, for at most `DRAIN_TIME` (a process outside the trial may hold it open)."""
        end = time.monotonic() + DRAIN_TIME
        while True:
            left = end - time.monotonic()
            if left <= 0:
                logger.warning(
                    "the script's output stayed open %g s after it exited (a process it started holds it); "
                    "stopped reading it",
                    DRAIN_TIME,
                )
                return
            if sel.select(timeout=min(left, _TICK)) and self._pump(fd, log, meter):
                return

    def _poll_events(self, meter: Meter) -> None:
        if self.tail is not None:
            for ev in self.tail.poll():
                self._on_epoch(ev, meter)
        elif self.steps_tail is not None:
            self.steps_tail.poll()

    def _judge(self, meter: Meter, tree: ProcessTree) -> None:
        """Decide whether to stop (if not yet decided) and advance the stop sequence."""
        p = self.plan
        t, e, c = meter.now()
        if self.stop_reason is None:
            self.listener.on_tick(t, e, c)
            if self.cancel.is_set():
                self._decide(StopReason.INTERRUPTED, (t, e, c))
            elif p.timeout is not None and t > p.timeout:
                self._decide(StopReason.TIMEOUT, (t, e, c))
            elif c > p.cost_threshold:
                self._decide(StopReason.COST_THRESHOLD, (t, e, c))
        if self.stop_reason is None:
            return
        now = time.monotonic()
        if not self.stopping:
            self.stopping = True
            finishing = self.stop_reason.finishing and not p.prompt_on_target
            self._touch_stop_file()
            grace = p.stop_grace if finishing else p.term_grace
            self.prompt = not finishing
            self.term_at = None if grace is None else now + grace
        elif not self.prompt:
            # A finishing stop still gives way to a cancel and to the timeout.
            why = (
                "zeus-run was interrupted"
                if self.cancel.is_set()
                else "the timeout passed"
                if p.timeout is not None and t > p.timeout
                else None
            )
            if why is not None:
                self.prompt = True
                self.notes.append(f"{why} while the script was finishing after {self.stop_reason}")
                due = now + p.term_grace
                self.term_at = due if self.term_at is None else min(self.term_at, due)
        if not self.sent and self.term_at is not None and now >= self.term_at:
            self.sent = "sigterm"
            self.kill_at = now + p.kill_grace
            logger.debug("sending SIGTERM to the trial (%s)", self.stop_reason)
            tree.signal(signal.SIGTERM)
        elif self.sent == "sigterm" and self.kill_at is not None and now >= self.kill_at:
            self.sent = "killed"
            logger.warning(
                "training script (pid %s) ignored SIGTERM for %g s; sending SIGKILL", tree.root, p.kill_grace
            )
            tree.signal(signal.SIGKILL)

    def _touch_stop_file(self) -> None:
        path = self.plan.stop_path
        for _ in range(2):
            if _fs.touch(path):  # never through a link the script planted
                return
            if os.path.islink(path):  # replace the link itself (the trial's directory is ours)
                try:
                    os.unlink(path)
                except OSError:
                    break
                continue
            if os.path.lexists(path) or path.parent.exists():
                break
            try:  # the script removed its own log directory
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError:
                break
        logger.warning("could not create the stop file %s; the script will be stopped by signal", path)

    def _feed_profiler(self, meter: Meter) -> None:
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

    def _outcome(self, exit_code: int, end: tuple[float, float, float]) -> TrialOutcome:
        reason = self.stop_reason
        t, e, c = self.counted if self.counted is not None else end
        message = None
        if reason is None:
            if exit_code == 0:
                reason = StopReason.EXITED
                message = f"the script exited after {len(self.metrics)} epoch(s) without reaching the target"
            else:
                reason = StopReason.CRASHED
                message = f"exit code {exit_code}; last output:\n{log_tail(self.plan.log_path)}"
        elif reason is StopReason.TIMEOUT:
            message = f"no result within the {self.plan.timeout:g} s timeout"
        if self.regex is not None and self.regex.hits == 0:
            self.notes.insert(0, self.regex.no_match_note())
        if self.regex is not None and self.regex.cut:
            logger.info(
                "%d output line(s) longer than %d characters were matched on their start only",
                self.regex.cut,
                REGEX_LINE_LIMIT,
            )
        malformed = (self.tail.malformed if self.tail else 0) + (self.regex.reader.malformed if self.regex else 0)
        if malformed:
            logger.warning("ignored %d malformed metric line(s) from the script", malformed)
        if self.splitter.overlong:
            logger.info(
                "%d output line(s) longer than 64 KiB were cut in the live view (the log has them whole)",
                self.splitter.overlong,
            )
        cause = crash_cause(reason, message, exit_code)
        if self.notes:
            message = "; ".join([*self.notes, *([message] if message else [])])
        decided = self.counted is not None
        return TrialOutcome(
            epochs=len(self.metrics),
            time=t,
            energy=e,
            max_power=self.energy.max_power,
            cost=c,
            reached=self.reached,
            stop_reason=reason,
            exit_code=exit_code,
            ended=self.sent or "exited",
            after_time=max(end[0] - t, 0.0) if decided else None,
            after_energy=max(end[1] - e, 0.0) if decided else None,
            metrics=tuple(self.metrics),
            message=message,
            malformed=malformed,
            power_limit=self.profiler.chosen if self.profiler is not None else None,
            cause=cause,
        )


__all__ = [
    "DRAIN_TIME",
    "TrialListener",
    "TrialOutcome",
    "TrialPlan",
    "preflight",
    "run_trial",
    "trial_environment",
]
