"""Launch one trial of a training script, watch it, and stop it gracefully.

A self-contained unit: a plain-data `TrialPlan` in, a plain-data
`TrialOutcome` out (both convert to and from JSON), so the same code can run
in the launcher or in an agent beside the script. It needs only an energy
source (and, optionally, a power-limit profiler) from its caller.

The script runs in a session (and, where one can be made, a cgroup) of its own, its environment marked with the
trial's token, and its orphans come back to this process, its subreaper (`zeus_run.trial.proctree`). Its output
(stdout and stderr, through a pipe or a pseudo-terminal: `zeus_run.trial.output`) is streamed, chunk by chunk and
never blocking, to the trial's log file and to a listener; when every metric line arrives in one burst at the exit,
the outcome says so (`zeus_run.trial.burst`). The launcher reads each finished epoch's metric (event log or regex),
measures time and energy at every epoch boundary, and decides to stop the trial when the target is reached,
``max_epochs`` is hit, the cost after the next epoch (predicted as the last epoch's cost) would exceed the threshold
or already has, the timeout passes (the one rule of every door, `zeus_run.trial.stop.StopRule`), or it is
cancelled. Cost is counted up to that decision.

The stop protocol (README, "Stopping a trial"):

1. create the stop file (``ZEUS_STOP_FILE``);
2. wait for the script to exit by itself: ``stop_grace`` seconds after the
   target or ``max_epochs`` (a *finishing* stop: the script saves its model),
   ``term_grace`` seconds after an early stop, a timeout or a cancel (a
   *prompt* stop); in regex mode ``on_target: stop`` makes the target a prompt
   stop too;
3. SIGTERM to every process of the trial; 4. SIGKILL after ``kill_grace``.

Time and energy from the decision to the script's exit are recorded apart (``after_time``, ``after_energy``).
When the script's main process has exited, every process it left behind is killed, its output is drained for at
most `DRAIN_TIME` seconds, and the trial is over.
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

from zeus_run import _fs
from zeus_run.contract import Env, StopReason, TrialFiles, TrialOutcome, TrialPlan, crash_cause, reaches_target
from zeus_run.energy import EnergySource
from zeus_run.trial import burst
from zeus_run.trial._cgroup import TrialCgroup
from zeus_run.trial.events import EpochEvent, EventLogTail, LineSplitter, remove_quietly
from zeus_run.trial.hooks import NullListener, TrialListener, TrialProfiler
from zeus_run.trial.launch import launch_error, preflight, trial_environment
from zeus_run.trial.log import TrialLog, log_tail
from zeus_run.trial.meter import Meter
from zeus_run.trial.metric_regex import metric_readers, reading_notes
from zeus_run.trial.output import OutputChannel
from zeus_run.trial.proctree import ProcessTree, subreaper
from zeus_run.trial.stop import StopRule

logger = logging.getLogger(__name__)

_TICK = 0.05  # unit: s; how often the launcher wakes when the script is silent
_READ_CHUNK = 65536
_READS_PER_TICK = 16  # at most 1 MiB of output per tick, so a flood cannot starve the stop rules

#: Seconds to read a script's remaining output after its main process exited.
DRAIN_TIME = 2.0
#: Most seconds an early stop waits for a script that is still starting (importing) before its grace starts.
START_WAIT = 30.0


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
        LaunchError: The command could not be started (`zeus_run.trial.launch.launch_error`).
        LaunchEnvironmentError: This machine could not start it (too many open files, no memory).
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
        self.rule = StopRule.of_plan(plan)
        self.profiler = profiler
        self.energy = energy
        self.listener = listener
        self.cancel = cancel
        self.metrics: list[float] = []
        self.arrivals: list[float] = []  # when each metric line was read (s since the start; regex mode)
        self.exited_at = 0.0  # when the main process was seen to exit (s since the start)
        self.after_metrics: list[float] = []  # reported after the stop decision (not counted)
        self.reached = False
        self.stop_reason: StopReason | None = None
        self.counted: tuple[float, float, float] | None = None  # (time, energy, cost) at the judged boundary
        self.prev_cost = 0.0  # cost at the previous epoch boundary
        self.tail, self.regex = metric_readers(plan)
        self.splitter = LineSplitter()
        # Step counts come from the event log even when the metric is read otherwise.
        self.steps_tail: EventLogTail | None = None
        if isinstance(self.tail, EventLogTail):
            self.steps_tail = self.tail
        elif profiler is not None:
            self.steps_tail = EventLogTail(str(plan.event_path))
        self._profile_signalled = False
        self.notes: list[str] = []
        # The stop sequence: when SIGTERM and SIGKILL are due (monotonic; None: not scheduled).
        self.stopping = False
        self.prompt = False
        self.term_at: float | None = None
        self.kill_at: float | None = None
        self.sent = ""  # "", "sigterm" or "killed"
        # An early stop decided while the script is still starting: when its grace may start at the latest.
        self.awaiting_start: float | None = None

    # -- judging ---------------------------------------------------------------------
    def _on_epoch(self, ev: EpochEvent, meter: Meter) -> None:
        if self.stop_reason is not None:
            self._after_stop(ev, meter)
            return
        t, e, c = meter.now()
        self.metrics.append(ev.metric)
        epochs = len(self.metrics)
        self.listener.on_epoch(epochs, ev.metric, t, e, c)
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
        reason = self.rule.after_epoch(epochs, ev.metric, c, self.prev_cost, self.metrics)  # the one stop rule
        if reason is not None:
            self.reached = reason is StopReason.TARGET_REACHED
            self._decide(reason, (t, e, c))
        self.prev_cost = c

    def _after_stop(self, ev: EpochEvent, meter: Meter) -> None:
        """An epoch the script reported after the stop decision: not counted, kept as evidence.

        The epoch that was running when the cost threshold cut the trial is the one
        exception: when it reaches the target the script saves a trained model, so the
        trial is recorded as reached, counted up to that epoch.
        """
        first = not self.after_metrics
        self.after_metrics.append(ev.metric)
        if not (first and self.stop_reason is StopReason.COST_THRESHOLD and self.sent == "" and self._hits(ev.metric)):
            return
        t, e, c = meter.now()
        self.after_metrics.pop()
        self.metrics.append(ev.metric)
        self.listener.on_epoch(len(self.metrics), ev.metric, t, e, c)
        self.reached = True
        self._decide(StopReason.TARGET_REACHED, (t, e, c))
        if self.stopping and not self.plan.prompt_on_target:  # let it finish saving the model
            self.prompt = False
            self.awaiting_start = None
            grace = self.plan.stop_grace
            self.term_at = None if grace is None else time.monotonic() + grace

    def _hits(self, metric: float) -> bool:
        return reaches_target(metric, self.plan.target_metric, self.plan.higher_is_better)

    def _decide(self, reason: StopReason, at: tuple[float, float, float]) -> None:
        self.stop_reason = reason
        self.counted = at
        logger.debug("trial stop decided: %s at %s", reason, at)

    def _handle_lines(self, lines: list[bytes], meter: Meter) -> None:
        for line in lines:
            self.listener.on_output(line.decode("utf-8", "replace")[:4096])
            if self.regex is not None:
                for ev in self.regex.feed_line(line):
                    self.arrivals.append(time.monotonic() - meter.t0)
                    self._on_epoch(ev, meter)
        if self.regex is not None:
            self.regex.check_progress()

    # -- the process -----------------------------------------------------------------
    def run(self) -> TrialOutcome:
        p = self.plan
        env = trial_environment(p.env, p.token, p.stdout)
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
        times = p.log_path.parent / TrialFiles.OUTPUT_TIMES
        if os.path.lexists(times):  # an earlier attempt's
            remove_quietly(str(times))
        log = TrialLog(p.log_path)
        try:
            out = OutputChannel(p.stdout, log, times)
        except OSError as exc:  # no pipe or terminal to be had (too many open files)
            log.close()
            raise launch_error(p.argv[0], exc) from exc
        tree = ProcessTree(p.token) if p.token else None
        if tree is not None:
            self.energy.track(tree.cpu_seconds)
        try:
            if self.profiler is not None:
                self.profiler.start()
            meter = Meter(self.energy, p.eta, self.profiler)
            with subreaper():  # the script's orphans come to this process, not to init (`zeus_run.trial.proctree`)
                try:
                    proc = subprocess.Popen(
                        p.argv[0] if p.shell else list(p.argv),
                        shell=p.shell,
                        cwd=str(p.workdir),
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=out.child,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        bufsize=0,
                    )
                except OSError as exc:
                    raise launch_error(p.argv[0], exc) from exc
                cgroup = TrialCgroup.enter(p.token, proc.pid)  # None where none can be made
                fd = out.started(proc)
                if tree is None:
                    tree = ProcessTree("", proc.pid)  # the process group only
                tree.attach(proc.pid, cgroup)
                try:
                    with self.regex if self.regex is not None else contextlib.nullcontext():
                        exit_code, end = self._watch(proc, fd, out, log, meter, tree)
                finally:
                    if proc.poll() is None:  # an error in the launcher itself: leave nothing behind
                        tree.sweep()
                        proc.wait()
                    elif tree.cgroup is not None:
                        tree.sweep()
        finally:
            out.close()
            self.energy.track(None)
            log.close()
        if log.error:
            self.notes.append(log.error)
        return self._outcome(exit_code, end)

    def _watch(
        self, proc: subprocess.Popen, fd: int, out: OutputChannel, log: TrialLog, meter: Meter, tree: ProcessTree
    ) -> tuple[int, tuple[float, float, float]]:
        os.set_blocking(fd, False)
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        eof = False
        try:
            while True:
                if not eof:
                    if sel.select(timeout=_TICK):
                        eof = self._pump(fd, out, log, meter)
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
                tree.tend()  # reap the script's orphans that exited
                self._judge(meter, tree)
            # The main process exited (by itself or stopped): this is the end of the trial.
            end = meter.freeze()
            self.exited_at = time.monotonic() - meter.t0
            left = tree.sweep()  # whatever it left behind (daemons, children holding the output open)
            if left:
                logger.info("killed %d process(es) the script left running: %s", len(set(left)), sorted(set(left)))
            if not eof:
                self._drain(fd, sel, out, log, meter)
            self._take(out.rest(), log, meter)
            self._handle_lines(self.splitter.flush(), meter)
            if self.tail is not None:
                for ev in self.tail.finish():
                    self._on_epoch(ev, meter)
            return proc.returncode, end
        finally:
            sel.close()

    def _pump(self, fd: int, out: OutputChannel, log: TrialLog, meter: Meter) -> bool:
        """Read what output is there (bounded). Returns True at end of file (a pty: EIO once nobody holds it)."""
        for _ in range(_READS_PER_TICK):
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                return False
            except OSError:
                return True
            if not chunk:
                return True
            self._take(out.clean(chunk), log, meter)
        return False

    def _take(self, data: bytes, log: TrialLog, meter: Meter) -> None:
        if data:
            log.write(data)
            self._handle_lines(self.splitter.feed(data), meter)

    def _drain(self, fd: int, sel: selectors.BaseSelector, out: OutputChannel, log: TrialLog, meter: Meter) -> None:
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
            if sel.select(timeout=min(left, _TICK)) and self._pump(fd, out, log, meter):
                return

    def _poll_events(self, meter: Meter) -> None:
        if self.tail is not None:
            for ev in self.tail.poll():
                self._on_epoch(ev, meter)
        if self.steps_tail is not None and self.steps_tail is not self.tail:
            self.steps_tail.poll()

    def _judge(self, meter: Meter, tree: ProcessTree) -> None:
        """Decide whether to stop (if not yet decided) and advance the stop sequence."""
        p = self.plan
        t, e, c = meter.now()
        if self.stop_reason is None:
            self.listener.on_tick(t, e, c)
            reason = StopReason.INTERRUPTED if self.cancel.is_set() else self.rule.during(t, c)
            if reason is not None:
                self._decide(reason, (t, e, c))
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
            if self.stop_reason.early_stop and not self._responsive():
                # The script cannot look at the stop file yet (still importing): its grace starts once it can.
                self.awaiting_start, self.term_at = now + START_WAIT, None
        elif self.awaiting_start is not None and (self._responsive() or now >= self.awaiting_start):
            self.term_at = now + (p.term_grace if self._responsive() else 0.0)
            self.awaiting_start = None
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

    def _responsive(self) -> bool:
        """Whether the script can answer the stop file: it reads the event log's contract (`zeus_run.train`
        wrote its start, a step or an epoch). Regex and metric-file modes give no such sign: always True."""
        tail = self.tail
        if not isinstance(tail, EventLogTail):
            return True
        return tail.started is not None or tail.steps > 0 or bool(self.metrics)

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
                _fs.make_dirs(path.parent)
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
        malformed = reading_notes(self.tail, self.regex, self.splitter, self.notes)
        cause = crash_cause(reason, message, exit_code)
        timing = burst.epoch_timing(self.arrivals, self.exited_at)
        if timing is not None:
            self.notes.append(burst.note(len(self.arrivals), self.arrivals[-1] - self.arrivals[0]))
        if self.notes:
            message = "; ".join([*self.notes, *([message] if message else [])])
        decided = self.counted is not None
        return TrialOutcome.of(
            reason,
            epochs=len(self.metrics),
            time=t,
            energy=e,
            max_power=self.energy.max_power,
            cost=c,
            reached=self.reached,
            exit_code=exit_code,
            ended=self.sent or "exited",
            after_time=max(end[0] - t, 0.0) if decided else None,
            after_energy=max(end[1] - e, 0.0) if decided else None,
            metrics=tuple(self.metrics),
            message=message,
            malformed=malformed,
            power_limit=self.profiler.chosen if self.profiler is not None else None,
            profile_overhead=(
                self.profiler.overhead(self.plan.eta, self.energy.max_power) if self.profiler is not None else None
            ),
            cause=cause,
            epoch_timing=timing,
            after_metrics=tuple(self.after_metrics) or None,
        )


__all__ = [
    "DRAIN_TIME",
    "NullListener",
    "TrialListener",
    "TrialOutcome",
    "TrialPlan",
    "TrialProfiler",
    "preflight",
    "run_trial",
    "trial_environment",
]
