"""Training-side helper: read zeus-run's choices and report the metric each epoch.

This module uses only the standard library (and zeus-run's stdlib-only `zeus_run.contract`,
where the ``ZEUS_*`` names live), so any training script can import
it. A script that uses it::

    from zeus_run.train import Trial

    trial = Trial.from_env(batch_size=64, learning_rate=0.1)  # defaults when run by hand
    for epoch in trial.epochs():          # stops at max_epochs, the target, or when told to
        train_one_epoch(trial.batch_size, trial.learning_rate)
        trial.report(validate())          # one JSON line to $ZEUS_EVENT_LOG

The environment contract between zeus-run and the training script (all set
for every trial; the script may ignore any of them):

======================  =====================================================
ZEUS_BATCH_SIZE         batch size to train with
ZEUS_LEARNING_RATE      learning rate, scaled for the batch size (empty if none)
ZEUS_SEED               random seed for this trial: the spec's ``seed`` plus
                        the trial's index (trials the optimizer observed
                        before it; an interrupted trial that is re-run keeps
                        its seed), so every trial differs yet a re-run repeats
ZEUS_TARGET_METRIC      validation metric that counts as converged
ZEUS_HIGHER_IS_BETTER   ``1`` if larger metrics are better, else ``0``
ZEUS_MAX_EPOCHS         most epochs to train
ZEUS_ETA_KNOB           eta of the cost
ZEUS_COST_THRESH        early-stop cost threshold in joules (``inf`` if none)
ZEUS_CURVE_STOP         ``1`` if the learning curve may stop the trial too
ZEUS_LOG_DIR            directory for the script's own files for this trial
ZEUS_JOB_ID             job name, recurrence and try, e.g. ``demo-r3-t1``
ZEUS_RECURRENCE         1-based recurrence number
ZEUS_TRY                1-based try within the recurrence
ZEUS_EVENT_LOG          file to append JSON-line events to (what `report` writes)
ZEUS_STOP_FILE          created by zeus-run when the script should stop
ZEUS_ENERGY             the spec's ``energy`` section (JSON): how `Trial`
                        measures its own process when no launcher watches
                        it (ask/tell without ``exec``, the server)
ZEUS_TIMEOUT            the spec's ``timeout`` in seconds (empty if none)
ZEUS_PROFILE            ``1`` while zeus-run profiles GPU power limits in this
                        trial: `step` then writes iteration counts (see below)
ZEUS_PROFILE_STOP       created by zeus-run when profiling is over; `step`
                        goes back to counting silently
ZEUS_RUN_DIR            ask/tell: the run directory (for ``zeus-run tell``)
ZEUS_ASK_TOKEN          ask/tell: the ask's token (for ``zeus-run tell``)
ZEUS_HEARTBEAT          ask/tell: the file whose rewriting renews the ask's
                        lease; `Trial` rewrites it from a thread of its own
ZEUS_LEASE              ask/tell: the lease (seconds)
======================  =====================================================

Under ask/tell without ``zeus-run exec`` (nothing else watches the script),
`Trial` renews the ask's lease itself: it rewrites ``ZEUS_HEARTBEAT`` every
quarter lease (at most every 30 s) until `close`. It writes a ``start`` event
(under any launcher) so that ``zeus-run tell`` counts the time from there, and the
launcher knows the script can answer a stop. It also measures itself over the span
a launcher measures, its process from start to exit (``ZEUS_ENERGY``, through
`zeus_run.energy.SelfMeter`, imported only then; its docstring says how the start-up
before `Trial` is charged): each epoch event carries the time and energy since the
process began, an ``info`` event says how they were measured, an ``end`` event the
last reading when the trial closes and another at the process's exit (with its exit
code, and the last lines it printed if it failed), and the stop
rule (`zeus_run.trial.stop`, the launcher's) ends the trial when the next
epoch would cross ``ZEUS_COST_THRESH`` or ``ZEUS_TIMEOUT`` passes.

Event lines are JSON objects, each with the script's ``time`` (Unix seconds):

* ``{"event": "epoch", "epoch": 3, "metric": 0.91}``: one per validated epoch.
* ``{"event": "step", "n": 120}``: cumulative training iterations, for
  power-limit profiling. Only written while ``ZEUS_PROFILE=1`` and the
  ``ZEUS_PROFILE_STOP`` file does not exist, and at most once every 20 ms
  (counts are exact; only their timestamps are batched), so calling `step`
  every iteration costs a counter increment almost always.
* ``{"event": "info", "iters_per_epoch": 390}``: iterations in one epoch, so
  zeus-run can shrink its profiling windows to fit a short epoch. Sent by
  `set_iters_per_epoch`, or by `iterate` when the iterable has a length.

For power-limit profiling, call ``trial.step()`` once per training iteration,
or wrap the data loader: ``for x, y in trial.iterate(loader): ...``.

**With a batch-size server** (``zeus-run serve``, for pods that share no
filesystem with zeus-run): set ``ZEUS_SERVER`` (its URL), ``ZEUS_SERVER_TOKEN``
or ``ZEUS_SERVER_TOKEN_FILE``, and ``ZEUS_SERVER_JOB`` (the job's name there).
`from_env` then asks the server for the trial (the seeds' ``get_batch_size``),
unless ``ZEUS_SERVER_TRIAL`` holds the token of an ask made outside the script;
`epochs` starts the clock (``on_train_begin``); `report` sends each epoch
(``on_evaluate``), and its answer carries the server's stop decision; `close`
(or the end of the interpreter) tells the server how the trial ended. The
client is `zeus_run.remote`, standard library only.

zeus-run stops a trial itself when the target is
reached or the cost threshold would be crossed; `report` returning False and
`epochs` ending are a courtesy that lets the script exit cleanly first.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, TextIO, TypeVar

from zeus_run._process_trials import PROCESS, interactive, report_uncaught, write_end
from zeus_run.contract import (
    Env,
    env_float,
    env_int,
    exit_watch,
    reaches_target,
    write_heartbeat,
)
from zeus_run.remote import RemoteTrial

if TYPE_CHECKING:  # imported only when measuring: importing this module stays standard-library only
    from zeus_run.trial.stop import StopRule

T = TypeVar("T")


#: Learning rate `Trial.from_env` gives a script run by hand that names none
#: (and a job whose spec has no ``learning_rate``): Adam's usual default.
DEFAULT_LEARNING_RATE = 1e-3

#: Least time between two step events (unit: s).
STEP_EVENT_INTERVAL = 0.02
#: Least time between two checks of the profiling stop file (unit: s).
PROFILE_CHECK_INTERVAL = 0.25
#: Seconds between two checks of the cost against the threshold between epochs (when measuring itself).
WATCH_INTERVAL = 0.5


def _energy_settings(env: Mapping[str, str]) -> dict | None:
    """The ``energy`` settings a script measures itself with (``ZEUS_ENERGY``), or None where a launcher
    measures it (its trial token is set). A server's trial without them measures with the defaults."""
    if env.get(Env.TRIAL_TOKEN) or os.environ.get(Env.TRIAL_TOKEN):
        return None
    raw = env.get(Env.ENERGY) or ""
    try:
        settings = json.loads(raw) if raw.strip() else {}
    except ValueError:
        settings = {}
    return settings if isinstance(settings, dict) else {}


class Trial:
    """One training run as zeus-run configured it.

    Attributes:
        batch_size: Batch size to use.
        learning_rate: Learning rate to use (None if the job has none).
        seed: Random seed.
        max_epochs: Most epochs to run.
        target_metric: Converged once the metric reaches this (None: never stop for it).
        higher_is_better: Direction of the metric.
        metric_name: The metric's name in a framework's logs (spec ``metric.name``; None: not set).
        managed: True when launched by zeus-run (an event log is configured).
    """

    def __init__(
        self,
        batch_size: int,
        learning_rate: float | None = None,
        seed: int = 0,
        max_epochs: int = 100,
        target_metric: float | None = None,
        higher_is_better: bool = True,
        event_log: str | None = None,
        stop_file: str | None = None,
        profile: bool = False,
        profile_stop_file: str | None = None,
        remote: RemoteTrial | None = None,
        heartbeat_file: str | None = None,
        lease: float | None = None,
        metric_name: str | None = None,
        energy: dict | None = None,
        eta: float = 0.5,
        cost_threshold: float | None = None,
        timeout: float | None = None,
        count_startup: bool | None = None,
        curve_stop: bool = False,
        told_in_process: bool = False,
    ) -> None:
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.seed = seed
        self.max_epochs = max_epochs
        self.target_metric = target_metric
        self.higher_is_better = higher_is_better
        self.metric_name = metric_name
        self.event_log = event_log
        self.stop_file = stop_file
        #: The server's side of this trial when ``ZEUS_SERVER`` is set (`zeus_run.remote`), else None.
        self.remote = remote
        self.managed = event_log is not None or remote is not None
        self.epoch = 0
        self.reached = False
        self.last_metric: float | None = None
        self._steps = 0
        # Held for the trial's life and closed in close(), so no context manager.
        self._fh = _open_append(event_log) if event_log else None
        self._profiling = bool(profile) and self._fh is not None
        self._profile_stop_file = profile_stop_file
        self._last_step_emit = -1.0
        self._last_profile_check = -1.0
        self._iters_per_epoch_sent = False
        self._beats = threading.Event()
        self._beater: threading.Thread | None = None
        self._lock = threading.Lock()
        self.stop_reason: str | None = None  # the stop rule's reason when this process judged itself
        self._eta = eta
        self._rule_args = (cost_threshold, timeout, curve_stop)
        self._curve: list[float] = []
        self._prev_cost = 0.0
        # When the process began: a trial told back without an agent counts its time from
        # there, as an agent (`zeus-run exec`) counts from the script's start, imports included.
        self._count_startup = count_startup = not interactive() if count_startup is None else count_startup
        #: Told in this process (the `Job` block, the server's client), with its process's life counted: what the
        #: process spends after the tell is this trial's tail (`zeus_run._process_trials.ProcessTrials.tail_to`).
        self._tail_here = count_startup and energy is not None and (remote is not None or told_in_process)
        self._meter, began = PROCESS.open_meter(energy, count_startup, remote is None and not told_in_process)
        #: Told by `zeus-run tell` after this process exits (ask/tell, not the `Job` block nor the server): the
        #: process's exit gets the last reading, its exit code and its last output.
        self._told_after_exit = bool(heartbeat_file) and remote is None and not told_in_process
        # The script can now answer a stop (the launcher starts an early stop's grace from here).
        self._emit({"event": "start"} if began is None else {"event": "start", "process_start": began})
        if self._meter is not None:
            self._emit({"event": "info", "measured": self._meter.info()})
            if remote is not None:
                remote.meter = self.measured
                remote.after_exit_tell = self._exit_tail
            PROCESS.opened(self)
        elif self.event_log:  # a launcher measures it: its exit is still dated in its event log
            PROCESS.opened(self)
        if self._told_after_exit:
            exit_watch().install()
        if heartbeat_file:
            # Nothing reads this script's output: an exception that ends it is written as an event, so the
            # tell records what the launcher would have read in the log's tail.
            report_uncaught(self._emit)
            interval = min(max((lease or 120.0) / 4, 0.05), 30.0)
            self._beater = threading.Thread(
                target=self._beat, args=(heartbeat_file, interval), name="zeus-run lease", daemon=True
            )
            self._beater.start()

    def _watch_env(self) -> dict[str, str] | None:
        """What the watcher of this process's exit needs besides its environment: the server's token."""
        token = self.remote.client._token if self.remote is not None else None
        return {Env.SERVER_TOKEN: token} if token else None

    def _beat(self, path: str, interval: float) -> None:
        due = 0.0
        while True:
            if time.monotonic() >= due:
                due = time.monotonic() + interval
                try:
                    write_heartbeat(path)
                except OSError:
                    pass
            self._judge_now()
            if self._beats.wait(min(interval, WATCH_INTERVAL)):
                return

    def _measure(self) -> tuple[float, float, float] | None:
        """Time, energy and cost since the trial began, where this process measures itself."""
        if self._meter is None:
            return None
        t, e = self._meter.now()
        power = float(self._meter.source.max_power)
        return t, e, self._eta * e + (1.0 - self._eta) * power * t

    def _rule(self) -> StopRule:
        from zeus_run.trial.stop import StopRule

        threshold, timeout, curve = self._rule_args
        return StopRule(
            self.max_epochs,
            self.target_metric,
            self.higher_is_better,
            math.inf if threshold is None else threshold,
            timeout,
            curve,
        )

    def _judge_now(self) -> None:
        """Between epochs: the hard cut and the timeout of the stop rule, on this process's own measurement."""
        m = self._measure()
        if m is None or self.remote is not None or self.stop_reason is not None or self.epoch < 1:
            return
        reason = self._rule().during(m[0], m[2])
        if reason is not None:
            self._stop(str(reason), m)

    def _stop(self, reason: str, at: tuple[float, float, float]) -> None:
        """Stop here (the stop rule's ``reason``); ``at``: time, energy and cost, the point the tell counts to."""
        self.stop_reason = reason
        self._emit({"event": "stop", "reason": reason, "elapsed": at[0], "energy": at[1]})

    @classmethod
    def from_env(
        cls,
        batch_size: int = 32,
        learning_rate: float = DEFAULT_LEARNING_RATE,
        seed: int = 0,
        max_epochs: int = 100,
        target_metric: float | None = None,
        higher_is_better: bool = True,
    ) -> Trial:
        """Read the ``ZEUS_*`` environment; the arguments are defaults for running by hand.

        Run by hand (no ``ZEUS_*`` variables), every attribute has a usable
        value: ``learning_rate`` is `DEFAULT_LEARNING_RATE` unless given, and
        `epochs` runs ``max_epochs`` epochs, or until ``target_metric`` when one
        is given. The same default applies when zeus-run passes no learning rate
        (the spec has none).
        """
        hib = os.environ.get(Env.HIGHER_IS_BETTER)
        with PROCESS.asking():  # with a server, the ask is zeus-run's time, not the trial's
            remote = RemoteTrial.from_env()
        if remote is not None and remote.decision:
            return cls._from_decision(remote, learning_rate)
        return cls(
            batch_size=env_int(Env.BATCH_SIZE, batch_size),
            learning_rate=env_float(Env.LEARNING_RATE, learning_rate),
            seed=env_int(Env.SEED, seed),
            max_epochs=env_int(Env.MAX_EPOCHS, max_epochs),
            target_metric=env_float(Env.TARGET_METRIC, target_metric),
            higher_is_better=higher_is_better if hib is None else hib.strip() not in ("0", "false", "False"),
            event_log=os.environ.get(Env.EVENT_LOG) or None,
            stop_file=os.environ.get(Env.STOP_FILE) or None,
            profile=os.environ.get(Env.PROFILE, "").strip() == "1",
            profile_stop_file=os.environ.get(Env.PROFILE_STOP) or None,
            heartbeat_file=os.environ.get(Env.HEARTBEAT) or None,
            lease=env_float(Env.LEASE, None),
            metric_name=os.environ.get(Env.METRIC_NAME) or None,
            remote=remote,
            # Nothing watches the script (no launcher's trial token): it measures itself, as the launcher would.
            energy=_energy_settings(os.environ) if os.environ.get(Env.HEARTBEAT) or remote is not None else None,
            eta=env_float(Env.ETA_KNOB, 0.5) or 0.0,
            cost_threshold=env_float(Env.COST_THRESH, None),
            timeout=env_float(Env.TIMEOUT, None),
            curve_stop=os.environ.get(Env.CURVE_STOP, "").strip() == "1",
        )

    @classmethod
    def _from_decision(cls, remote: RemoteTrial, learning_rate: float) -> Trial:
        """A trial this process asked the server for (``ZEUS_SERVER`` without ``ZEUS_SERVER_TRIAL``)."""
        d = remote.decision
        lr = d.get("learning_rate")
        target = d.get("target_metric")
        return cls(
            batch_size=int(d["batch_size"]),
            learning_rate=learning_rate if lr is None else float(lr),
            seed=int(d.get("seed") or 0),
            max_epochs=int(d["max_epochs"]),
            target_metric=None if target is None else float(target),
            higher_is_better=bool(d.get("higher_is_better", True)),
            remote=remote,
            energy=_energy_settings(d.get("env") or {}),
        )

    def should_stop(self) -> bool:
        """Whether training should end now (target reached, max epochs, or zeus-run asked)."""
        if self.reached or self.epoch >= self.max_epochs:
            return True
        if self.remote is not None and self.remote.stop_reason is not None:
            return True
        if self.stop_reason is not None:
            return True
        return self.stop_file is not None and os.path.exists(self.stop_file)

    def epochs(self) -> Iterator[int]:
        """Yield epoch numbers 1, 2, ... until `should_stop`."""
        if self.remote is not None and self.epoch == 0:
            self.remote.begin()  # the seeds' on_train_begin: the server's clock starts here
        while not self.should_stop():
            yield self.epoch + 1

    def report(self, metric: float, epoch: int | None = None) -> bool:
        """Record the validation metric of the epoch just finished.

        Args:
            metric: Validation metric after this epoch.
            epoch: Epoch number (default: one more than the last reported).

        Returns:
            True if training should continue.
        """
        self.epoch = self.epoch + 1 if epoch is None else int(epoch)
        self.last_metric = float(metric)
        self._curve.append(self.last_metric)
        self.reached = self.reached or reaches_target(self.last_metric, self.target_metric, self.higher_is_better)
        event: dict = {"event": "epoch", "epoch": self.epoch, "metric": self.last_metric}
        m = self._measure()
        if m is not None:
            event["elapsed"], event["energy"] = m[0], m[1]
        self._emit(event)
        if self.remote is not None:  # on the server's disk before it answers; the server judges
            if m is None:
                self.remote.report(self.epoch, self.last_metric)
            else:
                info = self._meter.info() if self._meter is not None else None
                self.remote.report(self.epoch, self.last_metric, m[1], m[0], info)
        elif m is not None and self.stop_reason is None:
            rule = self._rule()
            reason = rule.after_epoch(self.epoch, self.last_metric, m[2], self._prev_cost, self._curve)
            reason = reason or rule.during(m[0], m[2])
            self._prev_cost = m[2]
            if reason is not None and reason.value in ("cost_threshold", "timeout", "no_progress"):
                self._stop(reason.value, m)
        return not self.should_stop()

    @property
    def steps(self) -> int:
        """Training iterations counted by `step` so far."""
        return self._steps

    def step(self, n: int = 1) -> None:
        """Count ``n`` training iterations (for power-limit profiling; cheap to call every iteration).

        Writes an event only while zeus-run profiles, at most every 20 ms.
        """
        self._steps += n
        if not self._profiling:
            return
        now = time.monotonic()
        if now - self._last_step_emit < STEP_EVENT_INTERVAL:
            return
        self._last_step_emit = now
        if self._profile_stop_file and now - self._last_profile_check >= PROFILE_CHECK_INTERVAL:
            self._last_profile_check = now
            if os.path.exists(self._profile_stop_file):
                self._profiling = False
                return
        self._emit({"event": "step", "n": self._steps})

    def set_iters_per_epoch(self, n: int) -> None:
        """Tell zeus-run how many iterations one epoch has (once is enough)."""
        if self._iters_per_epoch_sent or n <= 0:
            return
        self._iters_per_epoch_sent = True
        self._emit({"event": "info", "iters_per_epoch": int(n)})

    def iterate(self, iterable: Iterable[T]) -> Iterator[T]:
        """Yield from ``iterable`` (e.g. a data loader), calling `step` after each item.

        If the iterable has a length, it is reported as the iterations per epoch.
        """
        try:
            self.set_iters_per_epoch(len(iterable))  # type: ignore[arg-type]
        except TypeError:
            pass
        for item in iterable:
            yield item
            self.step()

    def _emit(self, event: dict) -> None:
        with self._lock:  # the lease thread writes too
            if self._fh is None:
                return
            event["time"] = time.time()
            self._fh.write(json.dumps(event) + "\n")
            self._fh.flush()

    def measured(self) -> tuple[float, float, dict] | None:
        """Time (s), energy (J) and how they were measured, since the trial began; None if not measured here."""
        if self._meter is None:
            return None
        t, e = self._meter.now()
        return t, e, self._meter.info()

    def _exit_tail(self) -> None:
        """This trial was told at the process's exit (it crashed, or ended without closing it, under a server):
        what the process spends after that tell, its teardown, is its tail, measured by the exit watcher to the
        moment the process is gone (issue 54: a crashed trial's last tenth of a second was not charged)."""
        w, meter, remote = PROCESS.watcher, self._meter, self.remote
        if w is None or meter is None or remote is None or not self._tail_here or w.fields != meter._fields:
            return
        counter = meter.source.counter()
        if counter is None or not w.ready():
            return
        orders = {"server": remote.client.url, "job": remote.job, "token": remote.token}
        PROCESS.watched = w.order({**orders, "mono": time.monotonic(), "counter": counter})

    def close(self) -> None:
        """Close the event log, stop renewing the ask's lease, and, with a server, tell it the trial ended."""
        self._beats.set()
        if self._beater is not None:
            self._beater.join()
            self._beater = None
        m = self.measured()
        write_end(self, "close", m)
        if self.remote is not None:
            if m is None:
                self.remote.finish()
            else:
                self.remote.finish(energy_j=m[1], measured=m[2], time_s=m[0])
        carry = None
        if self._meter is not None:
            carry = self._meter.handover()  # the source stays open for this process's next trial
            self._meter = None
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None
        PROCESS.closed(self, carry, None if m is None else (m[0], m[1]))
        if self.remote is not None and m is not None and self._count_startup:
            # What the process spends after this close, up to its next ask or its exit, is this trial's too
            # (`zeus_run.rundir.tails`), as a launcher charges a script to its exit.
            orders = {"server": self.remote.client.url, "job": self.remote.job, "token": self.remote.token}
            PROCESS.tail_to(self.remote.tail, orders)


def _open_append(path: str) -> TextIO:
    """The event log, opened to append (created 0644 whatever the umask: never writable by others)."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644), "a", encoding="utf-8")
