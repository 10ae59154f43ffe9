"""Launch one trial of a training script, watch it, and stop it gracefully.

A self-contained unit: a plain-data `TrialPlan` in, a plain-data
`TrialOutcome` out (both convert to and from JSON), so the same code can run
in the launcher or in an agent beside the script. It needs only an energy
source (and, optionally, a power-limit profiler) from its caller.

The script runs in a session of its own, its environment marked with the
trial's token (`zeus_run.proctree`). Its output is streamed, chunk by chunk and
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

import collections
import contextlib
import dataclasses
import logging
import math
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from zeus_run import _fs
from zeus_run.cost import zeus_cost
from zeus_run.energy import EnergySource
from zeus_run.errors import LaunchError
from zeus_run.events import EpochEvent, EventLogTail, LineSplitter, RegexMetricReader, remove_quietly
from zeus_run.proctree import MARKER, ProcessTree

logger = logging.getLogger(__name__)

_INTERPRETERS = re.compile(r"^(python[0-9.]*|pypy[0-9.]*|bash|sh|zsh|perl|ruby|node|Rscript)$")
_TICK = 0.05  # unit: s; how often the launcher wakes when the script is silent
_READ_CHUNK = 65536
_READS_PER_TICK = 16  # at most 1 MiB of output per tick, so a flood cannot starve the stop rules

#: Seconds to read a script's remaining output after its main process exited.
DRAIN_TIME = 2.0
#: Longest output line (after splitting at ``\r``) a metric regex is matched against (unit: characters).
REGEX_LINE_LIMIT = 4096
#: Longest time one line may take to match (unit: s); a slower line is skipped.
REGEX_LINE_TIME = 0.25
#: Lines that took too long before regex matching is switched off for the trial.
REGEX_SLOW_LIMIT = 3
#: Output lines with no regex match after which the launcher says so.
NO_MATCH_LINES = 200

#: ``ZEUS_*`` variables of the launcher-script contract (`zeus_run.train`). A
#: launcher that itself runs inside a trial does not pass its own on.
CONTRACT_VARS = (
    "ZEUS_BATCH_SIZE",
    "ZEUS_LEARNING_RATE",
    "ZEUS_SEED",
    "ZEUS_TARGET_METRIC",
    "ZEUS_HIGHER_IS_BETTER",
    "ZEUS_MAX_EPOCHS",
    "ZEUS_ETA_KNOB",
    "ZEUS_COST_THRESH",
    "ZEUS_LOG_DIR",
    "ZEUS_JOB_ID",
    "ZEUS_RECURRENCE",
    "ZEUS_TRY",
    "ZEUS_EVENT_LOG",
    "ZEUS_STOP_FILE",
    "ZEUS_PROFILE",
    "ZEUS_PROFILE_STOP",
    MARKER,
)

#: Stop reasons after which a script is expected to finish by itself.
FINISHING = ("target_reached", "max_epochs")


@dataclass(frozen=True)
class TrialPlan:
    """Everything needed to launch, judge and stop one trial (plain data).

    Attributes:
        argv: Command (placeholders already substituted); one string when ``shell``.
        workdir: Working directory.
        env: Variables added to the launcher's environment (``ZEUS_*``, the spec's ``env``).
        log_path: File that receives the script's stdout and stderr.
        event_path: JSON-lines event log (``ZEUS_EVENT_LOG``).
        stop_path: File created to ask the script to stop (``ZEUS_STOP_FILE``).
        max_epochs: Epoch limit.
        target_metric: Converged when the metric reaches this.
        higher_is_better: Direction of the metric.
        metric_regex: Regex read from the output, or None to read the event log.
        eta: Cost knob.
        cost_threshold: Stop once the cost would exceed this (unit: J; inf: never).
        timeout: Wall-clock limit (unit: s), or None. Holds through every grace period.
        shell: Run through ``/bin/sh -c``.
        stop_grace: Seconds the script may take to exit by itself after the target or
            ``max_epochs`` (None: for ever).
        term_grace: Seconds between the stop file and SIGTERM on a prompt stop.
        kill_grace: Seconds between SIGTERM and SIGKILL.
        on_target: Regex mode: ``stop`` (prompt stop at the target) or ``wait``.
        token: The trial's process marker (``ZEUS_TRIAL_TOKEN``); empty: none.
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
    stop_grace: float | None = 300.0
    term_grace: float = 2.0
    kill_grace: float = 10.0
    on_target: str = "stop"
    token: str = ""
    profile_stop_path: Path | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (paths as strings, an infinite threshold as None)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Path):
                v = str(v)
            elif isinstance(v, tuple):
                v = list(v)
            elif isinstance(v, Mapping):
                v = dict(v)
            out[f.name] = v
        if not math.isfinite(self.cost_threshold):
            out["cost_threshold"] = None
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialPlan:
        """The inverse of `to_json`."""
        d = dict(data)
        for key in ("workdir", "log_path", "event_path", "stop_path", "profile_stop_path"):
            if d.get(key) is not None:
                d[key] = Path(d[key])
        d["argv"] = tuple(d["argv"])
        d["env"] = {str(k): str(v) for k, v in d.get("env", {}).items()}
        if d.get("cost_threshold") is None:
            d["cost_threshold"] = math.inf
        return cls(**d)

    @property
    def prompt_on_target(self) -> bool:
        """Whether the target and ``max_epochs`` stop the script promptly (regex mode, ``on_target: stop``)."""
        return self.metric_regex is not None and self.on_target == "stop"


@dataclass(frozen=True)
class TrialOutcome:
    """What happened. Time, energy and cost count up to the point the trial was judged at.

    Attributes:
        epochs: Epochs counted.
        time: Unit: s.
        energy: Unit: J.
        max_power: Unit: W.
        cost: Unit: J.
        reached: Target reached.
        stop_reason: See `zeus_run.records.STOP_REASONS`.
        exit_code: The script's own exit code (negative: ended by that signal), None if it never ran.
        ended: ``exited`` (by itself), ``sigterm`` or ``killed``; None if it never ran.
        after_time: Time from the decision to stop to the script's exit (unit: s), None without a decision.
        after_energy: Energy in that time (unit: J), None without a decision.
        metrics: Metric after each counted epoch.
        message: Explanation for failures (log tail) and notes.
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
    ended: str | None = None
    after_time: float | None = None
    after_energy: float | None = None
    metrics: tuple[float, ...] = ()
    message: str | None = None
    malformed: int = 0
    power_limit: float | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        out = dataclasses.asdict(self)
        out["metrics"] = list(self.metrics)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialOutcome:
        """The inverse of `to_json`."""
        d = dict(data)
        d["metrics"] = tuple(d.get("metrics") or ())
        return cls(**d)


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


def trial_environment(additions: Mapping[str, str], token: str = "") -> dict[str, str]:
    """The script's complete environment: the launcher's, without its own trial contract, plus ``additions``."""
    env = {k: v for k, v in os.environ.items() if k not in CONTRACT_VARS}
    env.update(additions)
    if token:
        env[MARKER] = token
    return env


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
    frozen: tuple[float, float, float] | None = None

    def __post_init__(self) -> None:
        self.e0 = self.energy.read()

    def raw(self) -> tuple[float, float]:
        """Time (s) and energy (J) measured since the start."""
        return time.monotonic() - self.t0, max(self.energy.read() - self.e0, 0.0)

    def now(self) -> tuple[float, float, float]:
        """Time, energy and cost counted (observer mode accounts as if at the chosen limit).

        After `freeze`, the frozen reading (the script's exit).
        """
        if self.frozen is not None:
            return self.frozen
        t, e = self.raw()
        if self.profiler is not None:
            t, e = self.profiler.account(t, e)
        return t, e, zeus_cost(e, t, self.eta, self.energy.max_power)

    def freeze(self) -> tuple[float, float, float]:
        self.frozen = self.now()
        return self.frozen


class _Log:
    """The trial's output log. A write that fails (disk full) is reported once and logging stops; the trial goes on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error: str | None = None
        self._fd = -1
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            self._fail(exc)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while self._fd >= 0 and view:
            try:
                n = os.write(self._fd, view)
            except OSError as exc:
                self._fail(exc)
                return
            view = view[n:]

    def _fail(self, exc: OSError) -> None:
        self.error = f"could not write the trial's output to {str(self.path)!r} ({exc.strerror or exc}); the rest of its output was not logged"
        logger.warning("%s; the trial goes on", self.error)
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _AlarmTimeout(Exception):
    pass


class _BoundedRegex:
    """Matches the metric regex against output lines with bounded length and time.

    Each line is split at ``\\r`` (progress bars) and each piece is cut to
    `REGEX_LINE_LIMIT` characters. In the main thread, a SIGALRM timer bounds
    each match to `REGEX_LINE_TIME` (Python's ``re`` checks for signals while it
    backtracks); after `REGEX_SLOW_LIMIT` slow lines matching is switched off.
    Elsewhere only the length bound holds.
    """

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.reader = RegexMetricReader(pattern)
        self.lines = 0
        self.hits = 0
        self.slow = 0
        self.cut = 0
        self.off = False
        self.recent: collections.deque[str] = collections.deque(maxlen=5)
        self.warned = False
        self._armed = False
        self._old_handler: Any = None
        self._timed = False

    def __enter__(self) -> _BoundedRegex:
        if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
            old = signal.getsignal(signal.SIGALRM)
            if old in (signal.SIG_DFL, signal.SIG_IGN, None):
                self._old_handler = old
                signal.signal(signal.SIGALRM, self._on_alarm)
                self._timed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old_handler)
            self._timed = False

    def _on_alarm(self, _signum: int, _frame: object) -> None:
        if self._armed:
            self._armed = False
            raise _AlarmTimeout

    def feed_line(self, line: bytes) -> list[EpochEvent]:
        self.lines += 1
        text = line.decode("utf-8", "replace").strip()
        if text:
            self.recent.append(text[:200])
        if self.off:
            return []
        out: list[EpochEvent] = []
        for piece in line.split(b"\r"):
            if not piece.strip():
                continue
            if len(piece) > REGEX_LINE_LIMIT:
                piece = piece[:REGEX_LINE_LIMIT]
                self.cut += 1
            out += self._match(piece)
            if self.off:
                break
        self.hits += len(out)
        return out

    def _match(self, piece: bytes) -> list[EpochEvent]:
        if not self._timed:
            return self.reader.feed_line(piece)
        try:
            self._armed = True
            signal.setitimer(signal.ITIMER_REAL, REGEX_LINE_TIME)
            try:
                return self.reader.feed_line(piece)
            finally:
                self._armed = False
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _AlarmTimeout:
            self.slow += 1
            logger.warning(
                "metric.regex %r took more than %g s on one output line (catastrophic backtracking?); line skipped",
                self.pattern,
                REGEX_LINE_TIME,
            )
            if self.slow >= REGEX_SLOW_LIMIT:
                self.off = True
                logger.warning(
                    "metric.regex %r was too slow on %d lines; it is not matched any more in this trial. "
                    "Simplify it (avoid nested quantifiers such as (a+)+)",
                    self.pattern,
                    self.slow,
                )
            return []

    def no_match_note(self) -> str:
        shown = "\n".join(f"  | {line}" for line in self.recent) or "  (no output)"
        return (
            f"metric.regex {self.pattern!r} matched none of the script's {self.lines} output line(s); "
            f"its last lines:\n{shown}"
        )

    def check_progress(self) -> None:
        """Warn once, early, when many lines went by without a match."""
        if not self.warned and self.hits == 0 and self.lines >= NO_MATCH_LINES:
            self.warned = True
            logger.warning("%s\nFix metric.regex in the job spec, or the trial runs to its end.", self.no_match_note())


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
        self.stop_reason: str | None = None
        self.counted: tuple[float, float, float] | None = None  # (time, energy, cost) at the judged boundary
        self.prev_cost = 0.0  # cost at the previous epoch boundary
        self.tail = EventLogTail(str(plan.event_path)) if plan.metric_regex is None else None
        self.regex = _BoundedRegex(plan.metric_regex) if plan.metric_regex is not None else None
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
            # the hard cut in `_judge` still stops a trial whose cost crosses
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
            + (f" {MARKER}={p.token}" if p.token else ""),
        )
        log = _Log(p.log_path)
        tree = ProcessTree(p.token) if p.token else None
        if tree is not None:
            self.energy.track(tree.cpu_seconds)
        try:
            if self.profiler is not None:
                self.profiler.start()
            meter = _Meter(self.energy, p.eta, self.profiler)
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
        self, proc: subprocess.Popen, log: _Log, meter: _Meter, tree: ProcessTree
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

    def _pump(self, fd: int, log: _Log, meter: _Meter) -> bool:
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

    def _drain(self, fd: int, sel: selectors.BaseSelector, log: _Log, meter: _Meter) -> None:
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

    def _poll_events(self, meter: _Meter) -> None:
        if self.tail is not None:
            for ev in self.tail.poll():
                self._on_epoch(ev, meter)
        elif self.steps_tail is not None:
            self.steps_tail.poll()

    def _judge(self, meter: _Meter, tree: ProcessTree) -> None:
        """Decide whether to stop (if not yet decided) and advance the stop sequence."""
        p = self.plan
        t, e, c = meter.now()
        if self.stop_reason is None:
            self.listener.on_tick(t, e, c)
            if self.cancel.is_set():
                self._decide("interrupted", (t, e, c))
            elif p.timeout is not None and t > p.timeout:
                self._decide("timeout", (t, e, c))
            elif c > p.cost_threshold:
                self._decide("cost_threshold", (t, e, c))
        if self.stop_reason is None:
            return
        now = time.monotonic()
        if not self.stopping:
            self.stopping = True
            finishing = self.stop_reason in FINISHING and not p.prompt_on_target
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

    def _outcome(self, exit_code: int, end: tuple[float, float, float]) -> TrialOutcome:
        reason = self.stop_reason
        t, e, c = self.counted if self.counted is not None else end
        message = None
        if reason is None:
            if exit_code == 0:
                reason = "exited"
                message = f"the script exited after {len(self.metrics)} epoch(s) without reaching the target"
            else:
                reason = "crashed"
                message = f"exit code {exit_code}; last output:\n{_tail(self.plan.log_path)}"
        elif reason == "timeout":
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
        )


def _tail(path: Path, limit: int = 1500) -> str:
    try:
        with _fs.open_read(path) as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(size - limit, 0))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return "(no log)"


__all__ = [
    "DRAIN_TIME",
    "TrialListener",
    "TrialOutcome",
    "TrialPlan",
    "preflight",
    "run_trial",
    "trial_environment",
]
