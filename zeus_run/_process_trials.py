"""A training process's trials as one measurement (standard library only; `zeus_run.train` uses it).

A process that measures itself (`zeus_run.energy.SelfMeter`) charges each of its trials the span a launcher
charges a script: the first from the process's start, each later one from the process's ask for it, on the
source the one before handed on (`zeus_run.energy._self.Carry`), less the time the process spent asking
zeus-run for it (`asking`). A trial the process told itself (the `Job` block, the server's client) is charged
what the process spent after the tell, up to that next ask or the process's exit: its tail, appended for its
record (`zeus_run.rundir.tails`; `ProcessTrials.tail_to`). At the process's exit, each trial that is told after the exit (a plain ask/tell)
gets its last reading, its exit code and, if it failed, its last output (`zeus_run.contract.ExitWatch`), in an
``end`` event of its event log. One object per process: `PROCESS`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING

from zeus_run.contract import Env, exit_watch, process_start_time, watch_exit

if TYPE_CHECKING:
    from zeus_run._tail_watch import Watcher
    from zeus_run.energy import EnergySource, SelfMeter
    from zeus_run.energy._self import Carry
    from zeus_run.train import Trial

logger = logging.getLogger("zeus_run.train")

#: Most characters of a failed script's last output an ``end`` event carries.
END_OUTPUT_CHARS = 2000
#: A start-up longer than this (unit: s) charged to a trial is logged: a process that lives on between its trials
#: (a notebook, a service) charges its first trial its whole life before it, unless told not to.
STARTUP_WARN_S = 600.0


def end_event(
    at: str, m: tuple[float, float, dict] | None, code: int | None = None, output: str = "", power: float | None = None
) -> dict | None:
    """An ``end`` event: the last reading ``m`` (time s, energy J) taken ``at`` ``close`` or ``exit``, with the
    process's exit ``code``, if it failed its last ``output``, and the ``power`` (W) its teardown after the reading
    is charged at (`zeus_run.contract.ScriptEnd`); None without a reading."""
    if m is None:
        return None
    event: dict = {"event": "end", "at": at, "elapsed": m[0], "energy": m[1]}
    if power is not None:
        event["power"] = power
    if code is not None:
        event["exit_code"] = code
        if code != 0 and output:
            event["output"] = output[-END_OUTPUT_CHARS:]
    return event


def write_end(
    trial: Trial,
    at: str,
    m: tuple[float, float, dict] | None,
    code: int | None = None,
    output: str = "",
    power: float | None = None,
) -> None:
    """Write ``trial``'s `end_event` into its event log (appended, once the trial has closed it)."""
    event = end_event(at, m, code, output, power)
    if event is None:
        return
    if trial._fh is not None:
        trial._emit(event)
    elif trial.event_log:
        with contextlib.suppress(OSError), open(trial.event_log, "a", encoding="utf-8") as f:
            f.write(json.dumps({**event, "time": time.time()}) + "\n")


def report_uncaught(emit: Callable[[dict], None]) -> None:
    """Write an uncaught exception as an ``error`` event (through ``emit``) before the interpreter prints it."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        with contextlib.suppress(OSError, ValueError):
            emit({"event": "error", "message": f"{kind.__name__}: {exc}"[:2000]})
        previous(kind, exc, tb)

    sys.excepthook = hook


class ProcessTrials:
    """This process's trials as one measurement: where the next trial's window opens, the meter one trial hands
    to the next, and the last readings at the process's exit (one per process: `PROCESS`).

    A process that runs trial after trial (a server's client, the `Job` API) counts each one from the end of the
    one before, not from its own start, on the same open source (`zeus_run.energy.SelfMeter`'s carry).
    """

    def __init__(self) -> None:
        #: When the last trial of this process closed (Unix time; None: none has).
        self.closed_at: float | None = None
        #: The last closed trial's meter, still open, for the next trial (None: none).
        self.carry: Carry | None = None
        #: The last closed trial, where it is told after the exit: its event log, and its time and energy at close.
        self.last: tuple[Trial, float, float] | None = None
        #: Trials measured here and not closed, told after the exit (their last reading is the exit's).
        self.open: list[Trial] = []
        #: Event logs of this process's trials that a launcher measures: each gets an ``exited`` event at exit (where
        #: a trial whose launcher died ended: `zeus_run.engine.measure.unwatched_span`).
        self.launched: set[str] = set()
        #: Seconds this process spent asking zeus-run for its next trial since the last one closed (not charged),
        #: and the CPU time of those asks (unit: s).
        self.ask_s = 0.0
        self.ask_cpu_s = 0.0
        #: Where the tail of the last trial told in this process goes (`tail_to`; None: no such trial), and where
        #: it is said lost, with why, when it cannot be measured.
        self.tail: Callable[[float, float, str], None] | None = None
        self.lost: Callable[[str], None] | None = None
        #: The watcher that measures a tail to this process's exit, from outside it (None: none), and whether it
        #: holds the last told trial's tail.
        self.watcher: Watcher | None = None
        self.watched = False
        self._pid = os.getpid()  # a child forked from this process runs these hooks at its exit too: not its trials
        self._hooked = False
        self._lock = threading.Lock()

    def began(self) -> float | None:
        """When this process's next trial began: the end of its previous trial, else the process's start."""
        return self.closed_at if self.closed_at is not None else process_start_time()

    @contextlib.contextmanager
    def asking(self) -> Iterator[None]:
        """Time spent in here is zeus-run's own (an ask made in this process), not its next trial's."""
        t, cpu = time.monotonic(), _cpu_seconds()
        self.settle("next-ask")  # the last trial told here ends where this ask begins
        try:
            yield
        finally:
            with self._lock:
                self.ask_s += time.monotonic() - t
                self.ask_cpu_s += _cpu_seconds() - cpu

    def tail_to(
        self,
        send: Callable[[float, float, str], None],
        orders: dict | None = None,
        lost: Callable[[str], None] | None = None,
    ) -> None:
        """The trial this process just told itself (closed, then told) has its tail sent by ``send(time s, energy J,
        to)``: from now (the tell is zeus-run's work, not the trial's) to this process's next ask (``to="next-ask"``)
        or its exit (``"exit"``), measured on the meter it handed on. Where ``orders`` say where the tail goes
        (``run_dir`` and ``token``, or ``server``, ``job`` and ``token``) and this process's watcher reads the same
        device counter, the watcher measures a tail to the exit, to the moment the process is gone
        (`zeus_run._tail_watch`). ``lost(why)`` marks the tail lost where it cannot be measured."""
        with self._lock:
            carry = self.carry
            self.tail = send if carry is not None else None
            self.lost = lost if carry is not None else None
            self._cancel_watch()
            if carry is None:
                return
            try:  # the tail starts now: the tell before it was zeus-run's own work, as a launcher's tell is
                carry.at, carry.mono = time.time(), time.monotonic()
                carry.energy, carry.counter = carry.source.read(), carry.source.counter()
            except Exception as exc:  # a device error: the tail goes on from the close
                logger.info("could not read the energy after the tell (%s); the tail counts from the close", exc)
            w = self.watcher
            if orders is None or carry.counter is None or w is None or w.fields != carry.fields:
                return
            self.watched = w.order({**orders, "mono": carry.mono, "counter": carry.counter})

    def _cancel_watch(self) -> None:
        if self.watched and self.watcher is not None:
            self.watcher.order({})
        self.watched = False

    def settle(self, to: str) -> None:
        """Send the last told trial's tail: from its close's last reading to now (`tail_to`); the carried meter
        then goes on from here, so the next trial starts where the tail ends."""
        with self._lock:
            if to == "exit" and self.watched and self.watcher is not None and self.watcher.ready():
                self.tail = self.lost = None  # the watcher, alive, measures it to the moment this process is gone
                return
            self._cancel_watch()
            send, lost, carry, self.tail, self.lost = self.tail, self.lost, self.carry, None, None
            if send is None or carry is None:
                return
            try:
                now, mono, energy = time.time(), time.monotonic(), carry.source.read()
            except Exception as exc:  # a device error: the tail is not measured; the next trial goes on from the close
                logger.warning("could not read the energy after the last trial's tell (%s): its tail is lost", exc)
                if lost is not None:
                    with contextlib.suppress(Exception):  # zeus-run's own bookkeeping: never the script's failure
                        lost(f"the energy could not be read at the {to} ({exc})")
                return
            spent = (max(mono - carry.mono, 0.0), max(energy - carry.energy, 0.0))
            carry.at, carry.mono, carry.energy, carry.at_ask = now, mono, energy, to == "next-ask"
            self.closed_at = now
        try:
            send(*spent, to)
        except Exception as exc:  # zeus-run's own bookkeeping: never the script's failure
            logger.warning("could not record the last trial's %.1f s after its tell: %s", spent[0], exc)

    def take_ask(self) -> tuple[float, float]:
        """The time and CPU time this process spent asking since its last trial closed (units: s)."""
        with self._lock:
            spent, self.ask_s, self.ask_cpu_s = (self.ask_s, self.ask_cpu_s), 0.0, 0.0
        return spent

    def open_meter(
        self, energy: dict | None, count_startup: bool, asked_outside: bool = True
    ) -> tuple[SelfMeter | None, float | None]:
        """A new trial's meter (None: ``energy`` None, the launcher measures) and when its window opens (None: now;
        else this process's start or its previous trial's end, after its ask: `began`). ``asked_outside``: the
        trial was asked for outside this process (a shell's ``zeus-run ask``), whose counter reading
        (``ZEUS_ASK_ENERGY``, of the ask ``ZEUS_ASK_TOKEN`` names) its start-up is measured from; a process that
        asked for itself (the `Job` API, a server's client) never takes a reading left in its environment."""
        began = self.began() if count_startup else None
        carry = self.take_carry() if count_startup and energy is not None else None
        ask = self.take_ask() if count_startup else (0.0, 0.0)
        meter = None
        if energy is not None:
            from zeus_run.energy import SelfMeter  # only now: importing `zeus_run.train` stays standard-library only

            at_ask = None
            if carry is None and began is not None:  # a shell's `zeus-run ask` on this host read the counter
                from zeus_run.energy import parse_ask_reading

                at_ask = parse_ask_reading(os.environ.get(Env.ASK_ENERGY)) if asked_outside else None
                if at_ask is not None and "token" in at_ask and at_ask["token"] != os.environ.get(Env.ASK_TOKEN):
                    at_ask = None  # left exported by an earlier eval of another ask
            meter = SelfMeter(energy, began, carry, *ask, at_ask=at_ask)
            extended = float(meter.window.get("extended_s") or 0.0)
            if extended > STARTUP_WARN_S:
                logger.warning(
                    "this trial is charged the %.0f s this process lived before it (its start-up, as a launcher "
                    "charges a script's); for a process that lives on between trials (a notebook, a service) pass "
                    "zeus_run.Job(..., count_startup=False)",
                    extended,
                )
        return meter, None if began is None else began + ask[0]  # the trial's own time starts after the ask

    def take_carry(self) -> Carry | None:
        """The meter the last trial handed on (the next trial's window goes on from its last reading)."""
        with self._lock:
            carry, self.carry, self.last = self.carry, None, None
        return carry

    def opened(self, trial: Trial) -> None:
        with self._lock:
            if trial._told_after_exit:
                self.open.append(trial)
            elif trial.event_log:
                self.launched.add(trial.event_log)
            meter = trial._meter
            if (
                trial._tail_here
                and meter is not None
                and self.watcher is None
                and os.getpid() == self._pid
                and _has_counter(meter.source)
            ):
                from zeus_run import _tail_watch  # a process that tells its trials: its exit watched from outside

                self.watcher = _tail_watch.start(meter._fields, trial._watch_env())
            if not self._hooked:
                self._hooked = True
                atexit.register(self.at_exit)

    def closed(self, trial: Trial, carry: Carry | None, reading: tuple[float, float] | None) -> None:
        with self._lock:
            if trial in self.open:
                self.open.remove(trial)
            if carry is not None:
                if self.carry is not None and self.carry.source is not carry.source:
                    self.carry.close()
                self.carry = carry
                self.last = (trial, *reading) if trial._told_after_exit and reading is not None else None
            self.closed_at = time.time()
            self.ask_s = self.ask_cpu_s = 0.0
            self.tail = self.lost = None  # its own tail is set once it is told (`tail_to`)
            self._cancel_watch()

    def at_exit(self) -> None:
        """The process is exiting: each trial told after the exit gets its last reading, its exit code and, if it
        failed, its last output (`zeus_run.contract.ExitWatch`)."""
        if os.getpid() != self._pid:
            return
        self.settle("exit")
        watch = exit_watch()
        code, output = watch.code(), watch.output()
        with self._lock:
            still_open, last, carry = list(self.open), self.last, self.carry
            self.open, self.last, self.carry = [], None, None
            launched, self.launched = sorted(self.launched), set()
        for path in launched:  # one line each: where the script ended, should no launcher see it end
            with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"event": "exited", "time": time.time()}) + "\n")
        logs = set()
        for trial in still_open:
            m = trial.measured()
            if m is not None and trial._meter is not None:
                write_end(trial, "exit", m, code, output, _power(trial._meter.source, m))
                logs.add(trial.event_log)
        if last is not None and carry is not None:
            trial, t, e = last
            try:
                reading = (t + max(time.time() - carry.at, 0.0), e + max(carry.source.read() - carry.energy, 0.0))
            except Exception:  # a device error at exit: the close's reading stands
                reading = None
            if reading is not None:
                write_end(trial, "exit", (*reading, {}), code, output, _power(carry.source, reading))
                logs.add(trial.event_log)
        for log in filter(None, logs):  # the interpreter's teardown after this hook counts too
            watch_exit(log)
        if carry is not None:
            with contextlib.suppress(Exception):  # at exit, nothing more to do with it
                carry.close()


def _power(source: EnergySource, reading: tuple[float, float, dict] | tuple[float, float]) -> float | None:
    """The power the teardown after the exit's reading is charged at (unit: W): what the source reads now, else the
    trial's mean power."""
    try:
        watts = source.power()
    except Exception:  # a device error at exit
        watts = None
    return watts if watts is not None else (reading[1] / reading[0] if reading[0] > 0 else None)


def interactive() -> bool:
    """Whether this process is interactive (a Jupyter kernel, IPython, ``python -i``, a REPL): it lived before its
    first trial for reasons of its own, so that life is not charged to it (``count_startup`` None)."""
    if "ipykernel" in sys.modules or hasattr(sys, "ps1") or sys.flags.interactive:
        return True
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    return callable(get) and get() is not None


def _has_counter(source: EnergySource) -> bool:
    """Whether ``source`` reads a device counter a watcher in another process can read too."""
    try:
        return source.counter() is not None
    except Exception:  # a device error: no watcher
        return False


def _cpu_seconds() -> float:
    """CPU time of this process and its reaped children (unit: s)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


#: This process's trials.
PROCESS = ProcessTrials()


def asking() -> contextlib.AbstractContextManager[None]:
    """A context for zeus-run's own asks made inside a training process (the `zeus_run.Job` API; `Trial.from_env`
    asking the server): their time is left out of the next trial's measured window, as a launcher's ask is."""
    return PROCESS.asking()
