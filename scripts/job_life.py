#!/usr/bin/env python3
"""A job's life: one nightly job through every door for N nights, with faults, checked after every night.

    python scripts/job_life.py --nights 60     # the long form (10-20 minutes)
    python scripts/job_life.py --short         # the short form (scripts/test_heavy.sh): every fault kind once, every door (9 nights)
    python scripts/job_life.py --nights 10     # every fault kind once, then 2 more nights
    python scripts/job_life.py --lives 10 --nights 30 -q   # the saving's coverage over 10 lives (seeds 1-10)

Exit code 0 only when every invariant held on every night; the last line is the summary.

**One job.** ``nightly``: one spec (``job.yaml``, ``recurrences: null``, NVML energy, a live Prometheus
export) and one run directory, ``ROOT/nightly``, where ``ROOT`` is the batch-size server's ``--root``:
docs/server.md has a server's job be the run directory ``ROOT/JOB``, "exactly as ``zeus-run run``
writes it", so the cron line, ask/tell, ``exec``, the ``Job`` API and the server all write one history.
The doors, as a user runs them (scripts/job_life_train.py is the training script):

    cron      zeus-run run job.yaml --next -q                                   (the launcher measures)
    ask-tell  out=$(zeus-run ask job.yaml --format env) || exit $?; eval "$out"
              python job_life_train.py > train.log 2>&1
              zeus-run tell "$ZEUS_RUN_DIR" "$ZEUS_ASK_TOKEN" --exit-code $?    (the script measures itself)
    exec      zeus-run exec --job job.yaml -q                                   (the agent measures)
    job-api   python job_life_train.py --job job.yaml: with zeus_run.Job(...).ask() as trial
    server    zeus-run serve --root ROOT --token-file F (up for the whole life), and the script with
              ZEUS_SERVER, ZEUS_SERVER_TOKEN_FILE and ZEUS_SERVER_JOB=nightly

A night is one recurrence: one cron trigger (zeus-run makes the tries), or through another door one
trial after another, as an orchestrator retries a failed step, until one reaches the target (at most
``max_tries``; not after a fault that a retry cannot mend: a busy job, a full disk). A night is a day:
where one leaves a trial in flight (``running.json``: a tell lost to a full disk, a dead client), the
harness waits out the spec's lease (30 s) before the next night, as the day between them would.

**Faults**, on nights a seeded schedule picks (nights 2..8 take one kind each, in a seeded order;
then about one night in three takes one at random):

    oom            every try fails as CUDA does when the batch size does not fit: the error printed and
                   ``sys.exit(1)`` (a script that catches it) on one oom night, raised on the next, in turn
    busy           another trigger (run --next, ask or exec --job, seeded) fires while the trial holds the job
    kill-launcher  kill -9 of the ``run --next`` launcher mid-trial; its script runs on, an orphan, to its
                   end; then the next trigger (the restart)
    kill-server    kill -9 of the server mid-trial; started again 1 s later on the same port
    restart        the server stopped (SIGTERM) and started again before the night
    full-disk      the run directory's filesystem (a 16 MiB tmpfs, mounted as root) filled mid-trial and
                   freed when the night ends; without root it is not injected, and the summary says so
    clock-jump     the wall clock (CLOCK_REALTIME) of every process steps mid-trial, alternately +15 s and
                   -3 h, and is set right when the night ends: an LD_PRELOAD shim (scripts/job_life_clock.c,
                   built with cc; without one it is not injected, and the summary says so) reads the offset
                   from a file. Monotonic clocks and the kernel's file times do not move, as with a real step
                   (libfaketime 0.9.10 moves the monotonic clock, or breaks Python's sleep)

**Energy** comes from the NVML double (tests/fake_pynvml, through PYTHONPATH and FAKE_NVML_NODES) in
every process that measures, as hard as a GPU (tests/fake_nvml.py, ``GpuTruth``): one counter shared by every
process on the GPU (its origin the life's start), updated every 20-100 ms (seeded per night), power sampled
25% of each update period (as A100/H100 do), and a power that follows what the script does: it appends a
mark to the GPU's marks file (``$JOB_LIFE_GPU_MARKS``) as it starts (the idle draw, 50-110 W: its imports do
not drive the GPU), gets its trial (the night's training draw, 150-290 W), saves after its last epoch (a tail
draw, 90-160 W) and exits (idle again; the harness marks idle before each night). The harness keeps its own
**ledger**: each script process's span, from its start (the kernel's ``/proc/PID/stat``, which the script
writes to the ledger file first thing) to its exit (seen by the harness through a pidfd), and what the GPU
drew over it, the marks integrated by the harness's own code (`Marks`; neither zeus-run's nor the double's).
A script that asks and tells zeus-run from inside its own process (the Job API, the server's client) also
writes when its ask began and ended and when its tell began and returned, by its own clock: its span leaves
the ask and the tell out (zeus-run's work, as ``run``'s decision and tell are) and runs to its exit.

**Invariants**, checked after every night (each violation: night, door, trial, expected, seen):

    wedge      a night without an oom or full-disk fault reaches a new recurrence, the next one (the
               last one again if it was left open; after a killed launcher, it and the next: the
               calendar catches up); the door's last command exits 0
    accounted  recurrences 1..R with none missing; a (recurrence, try) and a trial number once each;
               tries 1..k; at most one reached trial per recurrence; every script that got a trial has
               exactly one record (by the end of the next night after a kill or a full disk) and every
               record without a script claims no energy
    audit      zeus-run replay RUN_DIR exits 0
    energy     each record's energy + after_energy within 5% of the ledger's (the marks over the span),
               plus the counter's honest slack (an update period x (the largest power + each change of
               power in the span)); a record that says no meter read it (``energy_source: unmeasured``: a
               trial its dead launcher left unwatched, a lease that expired when a full disk lost its tell)
               is imputed: its time is checked (an expired lease's from its ask to its last sign of life:
               above 0 and within its process's span), and its power (energy / time) must lie within the
               range of the job's measured trials' powers (+-5%): an imputation at a tenth fails
    time       each record's time + after_time within 5% of the ledger's span
    exports    the last push to the Pushgateway double (in this process; the spec's live export) and
               ``zeus-run export prometheus`` equal the history: trials by outcome, recurrences reached
               and open, total energy and time, the current batch size
    verdicts   every try of an oom night is an observed crash with exit code 1 naming the OOM; no try is
               recorded as an observed crash of its batch size because of a full disk, a killed launcher
               or a killed server
    orphan     the script whose launcher a kill-launcher night killed runs to its end (exit 0: it prints every
               epoch, and its output must not need the dead launcher's pipe), and the next trigger records
               its epochs as reached (its record says what its script's last line says), without running
               that recurrence again
    busy       the busy trigger exits 75 within 30 s and starts no script
    clean      every command ends (none hangs for 240 s) and prints no traceback from zeus-run's code; the
               server's log holds no traceback through zeus-run's code (indented, as it logs them) and no
               answer 500

**The true saving.** The training script has a known cost per batch size (its start-up, its seconds per
epoch, its epochs to the target, its save), so the harness knows what always running the default batch size
would have spent, from its own ledger (`true_sides`): one run of the default for each recurrence that reached
the target, at its known cost plus what a launch adds (the median over the reached runs) at the night's draw;
the tries that would have hit the default too on both sides, as they ran, by the one rule for bad nights
(docs/savings.md; `hits_default`): an environment error, a lost node, a try without a record, and on a night
no batch size reached (an out-of-memory night fails every batch size) each try at or below the default batch size;
an interrupted launcher, a spec error and a failure above the default batch size are zeus-run's alone. zeus-run's side is every script's
span times its night's draw. After every night it checks that the 90% interval ``history --format json``
states for the energy and time saving holds the truth (`check_saving`); a miss is not a violation (a 90%
interval misses one time in ten): the summary gives how often it held, and ``--lives N`` the same over N lives.

Everything runs without PYTHONUNBUFFERED (and without the caller's ZEUS_* variables). ``--keep``
keeps the work directory (the run directory, the ledger, every command's output) for inspection.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import http.server
import importlib.util
import itertools
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "scripts" / "job_life_train.py"
CLOCK_SRC = REPO / "scripts" / "job_life_clock.c"
FAKE_PYNVML = REPO / "tests" / "fake_pynvml"

JOB = "nightly"
DOORS = ("cron", "ask-tell", "exec", "job-api", "server")
FAULTS = ("oom", "busy", "kill-launcher", "kill-server", "restart", "full-disk", "clock-jump")
#: The door a fault needs (the others fit any door).
FAULT_DOOR = {"kill-launcher": "cron", "kill-server": "server", "restart": "server"}
#: The triggers a busy fault fires.
BUSY_DOORS = ("cron", "ask", "exec")
#: Faults after which a night is not expected to reach its recurrence.
NO_REACH = ("oom", "full-disk")
INVARIANTS = ("wedge", "accounted", "audit", "energy", "time", "exports", "verdicts", "orphan", "busy", "clean")

TOLERANCE = 0.05  # energy and time: the ledger's +-5%
#: Share of each counter update period in which the double samples power (A100/H100: 25%).
SAMPLE_SHARE = 0.25
MAX_TRIES = 3
#: The spec's lease (unit: s). A night takes seconds here, not a day: where a night leaves an ask in flight
#: (``running.json``), the harness lets "the day pass" by waiting this long before the next night.
LEASE_S = 30.0
#: Share of nights after the first eight that take a fault.
FAULT_SHARE = 0.35
#: Clock steps, in turn (unit: s), each mid-trial and undone when the night ends (as NTP puts a clock right).
#: Forward less than the lease minus a heartbeat interval: the kernel's file times do not step with the shim,
#: so a larger forward step would expire leases that a real step does not.
CLOCK_STEPS = (15.0, -3 * 3600.0)
DISK_SIZE = "16M"
#: The spec's default batch size.
DEFAULT_BATCH_SIZE = 64
COMMAND_TIMEOUT = 240.0
BUSY_TIMEOUT = 30.0
SERVER_TIMEOUT = 60  # ZEUS_SERVER_TIMEOUT of the server's client (unit: s)
#: Records that claim energy without a script of their own may claim this much (unit: J).
NO_SCRIPT_ENERGY = 1.0


# -- the schedule -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Night:
    """One night: its door, faults, the GPU's draw, the clock step and the busy trigger's door."""

    n: int
    door: str
    faults: tuple[str, ...] = ()
    draw_w: int = 200
    clock_step: float = 0.0
    busy_door: str = ""
    oom_exit: bool = False  # the OOM printed and sys.exit(1), not raised
    idle_w: int = 70  # the GPU's draw while no script trains on it, the script's start-up included (unit: W)
    tail_w: int = 120  # its draw while the script saves after its last epoch (unit: W)
    update_ms: int = 50  # the double's counter update period (unit: ms)

    @property
    def phases(self) -> dict[str, int]:
        """The GPU's draw in each phase of a script (unit: W): ``draw_w`` is the training draw."""
        return {"idle": self.idle_w, "startup": self.idle_w, "train": self.draw_w, "tail": self.tail_w}

    @property
    def expects_reach(self) -> bool:
        return not any(f in NO_REACH for f in self.faults)


def schedule(nights: int, seed: int, doors: Sequence[str] = DOORS, skip: Sequence[str] = ()) -> list[Night]:
    """The nights, reproducibly from ``seed``: night 1 plain cron (it creates the run directory), nights 2..8
    one fault kind each in a seeded order, then a fault on about a third of the nights."""
    rng = random.Random(seed)
    kinds = [k for k in FAULTS if k not in skip and FAULT_DOOR.get(k, doors[0]) in doors]
    first = list(kinds)
    rng.shuffle(first)
    plan: list[tuple[str, ...]] = [(), *((k,) for k in first)]
    while len(plan) < nights:
        plan.append((rng.choice(kinds),) if kinds and rng.random() < FAULT_SHARE else ())
    steps = itertools.cycle(CLOCK_STEPS)
    oom_exits = itertools.cycle((True, False))
    pool: list[str] = []  # the doors in a seeded order, round after round: every door takes its share of nights
    out = []
    gpu = random.Random(seed * 7919 + 1)  # the GPU's other draws: apart, so the schedule of old seeds holds
    for n, faults in enumerate(plan[:nights], 1):
        need = {FAULT_DOOR[f] for f in faults if f in FAULT_DOOR}
        if not pool:
            pool = rng.sample(list(doors), len(doors))
        door = need.pop() if need else ("cron" if n == 1 and "cron" in doors else pool.pop())
        out.append(
            Night(
                n=n,
                door=door,
                faults=faults,
                draw_w=rng.randrange(150, 291),
                clock_step=next(steps) if "clock-jump" in faults else 0.0,
                busy_door=rng.choice(BUSY_DOORS) if "busy" in faults else "",
                oom_exit=next(oom_exits) if "oom" in faults else False,
                idle_w=gpu.randrange(50, 111),
                tail_w=gpu.randrange(90, 161),
                update_ms=gpu.randrange(20, 101),
            )
        )
    return out


def fewest_nights(seed: int, doors: Sequence[str] = DOORS, skip: Sequence[str] = ()) -> int:
    """The short form's length (``--short``): the fewest nights whose schedule from ``seed`` takes every fault kind
    (not skipped) and goes through every door, at least 8 (night 1 plain, then one night per fault kind)."""
    kinds = {k for k in FAULTS if k not in skip and FAULT_DOOR.get(k, doors[0]) in doors}
    for n in range(1 + len(kinds), 1 + len(kinds) + 4 * len(doors)):
        plan = schedule(n, seed, doors, skip)
        if {f for night in plan for f in night.faults} >= kinds and {night.door for night in plan} >= set(doors):
            return n
    return 1 + len(kinds) + 4 * len(doors)


# -- violations ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Violation:
    """One invariant that did not hold: where (night, door, trial), what was expected and what was seen."""

    invariant: str
    night: int
    door: str
    trial: str
    expected: str
    seen: str

    def line(self) -> str:
        return f"  ✗ [{self.invariant}] night {self.night} {self.door} {self.trial}: expected {self.expected}; seen {self.seen}"


def trial_name(recurrence: object, attempt: object) -> str:
    try:
        return f"r{int(recurrence):04d}-t{int(attempt):02d}"  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return "r?-t?"


# -- the harness's ledger -------------------------------------------------------------------------------------


def boot_now() -> float:
    """Seconds since boot (CLOCK_BOOTTIME: the clock of /proc/PID/stat's start time; no wall-clock step moves it)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            stat = f.read()
        rest = stat[stat.rindex(")") + 2 :].split()
        return None if rest[0] == "Z" else int(rest[19])
    except (OSError, ValueError, IndexError):
        return None


class Marks:
    """The GPU's true power, integrated here from the marks file the scripts write (``{"t": seconds since boot,
    "w": watts}`` lines, ``$JOB_LIFE_GPU_MARKS``): the same file the NVML double reads its power from, integrated
    by this code alone (no zeus-run code, nor the double's). Before the first mark the GPU draws ``idle_w``."""

    def __init__(self, path: Path, idle_w: float) -> None:
        self.path = path
        self.idle_w = idle_w
        self._pos = 0
        self._buf = b""
        self.points: list[tuple[float, float]] = []

    def read(self) -> list[tuple[float, float]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                chunk = f.read()
        except FileNotFoundError:
            return self.points
        self._pos += len(chunk)
        *lines, self._buf = (self._buf + chunk).split(b"\n")
        fresh = []
        for raw in lines:
            try:
                m = json.loads(raw)
                fresh.append((float(m["t"]), float(m["w"])))
            except (ValueError, KeyError, TypeError):
                continue
        if fresh:
            self.points = sorted(self.points + fresh)
        return self.points

    def pieces(self, a: float, b: float) -> list[tuple[float, float, float]]:
        """(from, to, watts) of constant power over [a, b)."""
        out, t, w = [], a, self.idle_w
        for tm, pw in self.read():
            if tm <= a:
                w = pw
            elif tm < b:
                out.append((t, tm, w))
                t, w = tm, pw
        if b > t:
            out.append((t, b, w))
        return out

    def energy(self, a: float, b: float) -> float:
        """What the GPU drew over [a, b) (unit: J)."""
        return sum((e - s) * w for s, e, w in self.pieces(a, b)) if b > a else 0.0

    def slack(self, a: float, b: float, update_ms: float) -> float:
        """How far a counter updated every ``update_ms`` and sampled part of the time may honestly be from
        `energy` over [a, b) (unit: J): each reading lags by up to a period (at most a period of the largest power
        between the two), and a change of power is seen up to a period late (a period x the change, each)."""
        ws = [w for _, _, w in self.pieces(a, b)]
        changes = sum(abs(y - x) for x, y in itertools.pairwise(ws))
        return update_ms / 1000.0 * (max(ws, default=0.0) + changes)


@dataclass(frozen=True)
class Draw:
    """What the GPU drew over a script's span by the ledger (unit: J), the counter's honest slack (unit: J) and
    how it was reckoned (for the violation's text)."""

    joules: float
    slack: float
    how: str


@dataclass
class Run:
    """One process of the training script, as the harness saw it."""

    pid: int
    night: int
    door: str
    start: float  # seconds since boot (the kernel's start time)
    recurrence: int | None = None
    attempt: int | None = None
    batch_size: int | None = None
    trial_at: float | None = None
    exit_line: float | None = None  # the script's last statement (seconds since boot)
    exit_seen: float | None = None  # the process's exit, through a pidfd (seconds since boot)
    exit_code: int | None = None
    reached: bool | None = None
    error: str | None = None
    ask_s: float = 0.0  # an ask made inside this process (the Job API, the server's client): zeus-run's work
    ask_at: tuple[float, float] | None = None  # that ask's start and end (seconds since boot)
    told: float | None = None  # a tell made inside this process returned (seconds since boot)
    telling: float | None = None  # and when it began

    @property
    def key(self) -> tuple[int, int] | None:
        if self.recurrence is None or self.attempt is None:
            return None
        return (self.recurrence, self.attempt)

    @property
    def ended(self) -> float | None:
        return self.exit_seen if self.exit_seen is not None else self.exit_line

    @property
    def span(self) -> float | None:
        """What every door must charge: the process from start to exit; for a process that asked and told
        zeus-run itself, less its ask and its tell (both measured by the script's own clock): what it does
        after the tell is the trial's tail (issue 46)."""
        if self.ended is None:
            return None
        tell_s = self.told - self.telling if self.told is not None and self.telling is not None else 0.0
        return self.ended - self.start - self.ask_s - max(tell_s, 0.0)

    @property
    def alive(self) -> bool:
        return self.ended is None

    def drew(self, marks: Marks, update_ms: float) -> Draw | None:
        """What the GPU drew over `span` (the marks integrated over the process, less its own ask)."""
        if self.ended is None:
            return None
        end = self.told if self.told is not None else self.ended
        joules = marks.energy(self.start, end)
        slack = marks.slack(self.start, end, update_ms)
        if self.ask_at is not None:
            joules -= marks.energy(*self.ask_at)
        watts = "/".join(f"{w:.0f}" for w in dict.fromkeys(w for _, _, w in marks.pieces(self.start, end)))
        return Draw(joules, slack, f"the marks ({watts} W) over {end - self.start - self.ask_s:.2f} s")


class Ledger:
    """The scripts' ledger lines (``$JOB_LIFE_LEDGER``), followed by a thread that watches each script's exit.

    The script writes its start (the kernel's), the trial it got and its last statement; the thread opens a
    pidfd on each new script and stamps the moment it becomes readable (the process ended) as its exit.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()
        self.runs: list[Run] = []
        self._by_pid: dict[int, Run] = {}
        self._pos = 0
        self._buf = b""
        self._lock = threading.Lock()
        self._poll = select.poll()
        self._fds: dict[int, Run] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ledger", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for fd in list(self._fds):
            os.close(fd)
        self._fds.clear()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._read()
            for fd, _ in self._poll.poll(10):
                now = boot_now()
                with self._lock:
                    run = self._fds.pop(fd, None)
                    if run is not None:
                        run.exit_seen = now
                self._poll.unregister(fd)
                os.close(fd)

    def _read(self) -> None:
        with open(self.path, "rb") as f:
            f.seek(self._pos)
            chunk = f.read()
        if not chunk:
            return
        self._pos += len(chunk)
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for raw in lines:
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            with self._lock:
                self._apply(ev)

    def _apply(self, ev: dict) -> None:
        pid = int(ev["pid"])
        if ev["event"] == "start":
            run = Run(pid=pid, night=int(ev.get("night") or 0), door=str(ev.get("door") or "?"), start=float(ev["t"]))
            self.runs.append(run)
            self._by_pid[pid] = run
            self._watch(run)
            return
        run = self._by_pid.get(pid)
        if run is None:
            return
        if ev["event"] == "trial":
            run.recurrence, run.attempt = ev.get("recurrence"), ev.get("attempt")
            run.batch_size, run.trial_at = ev.get("batch_size"), float(ev["t"])
        elif ev["event"] == "asked":
            run.ask_s = max(float(ev["t"]) - float(ev["t0"]), 0.0)
            run.ask_at = (float(ev["t0"]), float(ev["t"]))
        elif ev["event"] == "told":
            run.told = float(ev["t"])
        elif ev["event"] == "telling":
            run.telling = float(ev["t"])
        elif ev["event"] == "exit":
            run.exit_line, run.exit_code = float(ev["t"]), ev.get("exit_code")
            run.reached, run.error = ev.get("reached"), ev.get("error")

    def _watch(self, run: Run) -> None:
        try:
            fd = os.pidfd_open(run.pid)
        except OSError:
            return  # gone already: its exit is its last statement
        ticks = _start_ticks(run.pid)
        if ticks is None or abs(ticks / os.sysconf("SC_CLK_TCK") - run.start) > 0.02:
            os.close(fd)  # a zombie, or another process
            return
        self._fds[fd] = run
        self._poll.register(fd, select.POLLIN)

    def snapshot(self) -> list[Run]:
        with self._lock:
            return [dataclasses.replace(r) for r in self.runs]

    def wait(self, pred, timeout: float, proc: subprocess.Popen | None = None) -> Run | None:
        """The first run ``pred`` accepts, waiting up to ``timeout`` s (None once ``proc`` ended without one)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                for r in self.runs:
                    if pred(r):
                        return dataclasses.replace(r)
            if proc is not None and proc.poll() is not None:
                time.sleep(0.1)
                with self._lock:
                    return next((dataclasses.replace(r) for r in self.runs if pred(r)), None)
            time.sleep(0.02)
        return None

    def wait_ended(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                run = self._by_pid.get(pid)
                if run is not None and not run.alive:
                    return True
            time.sleep(0.05)
        return False


# -- the history, as a user reads it -----------------------------------------------------------------------


def read_history(path: Path) -> tuple[list[dict], str | None]:
    """``history.jsonl``'s records (JSON lines) and what was wrong with it, if anything (a torn line); each record
    with its tail after an in-process tell added (``tails.jsonl`` beside it, `tails`)."""
    if not path.exists():
        return [], None
    records, problem = [], None
    lines = path.read_bytes().split(b"\n")
    for i, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            records.append(json.loads(raw))
        except ValueError:
            problem = f"line {i} is not JSON ({raw[:60]!r}{' (the last line)' if i >= len(lines) - 1 else ''})"
    found = tails(path.parent)
    for r in records:
        tail = found.get(str((r.get("provenance") or {}).get("ask_token")))
        if tail is not None:
            r["after_time"] = float(r.get("after_time") or 0.0) + float(tail["time"])
            r["after_energy"] = float(r.get("after_energy") or 0.0) + float(tail["energy"])
            r["tail"] = tail
    return records, problem


def tails(run_dir: Path) -> dict[str, dict]:
    """Token -> the first tail appended for it (``tails.jsonl``: what a process that told its trial itself spent
    after the tell, up to its next ask or its exit; issue 46)."""
    out: dict[str, dict] = {}
    try:
        text = (run_dir / "tails.jsonl").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            tail = json.loads(line)
        except ValueError:
            continue
        if isinstance(tail, dict) and isinstance(tail.get("token"), str):
            out.setdefault(tail["token"], tail)
    return out


#: Doors whose script tells its trial itself: its tail after the tell lands when the process is gone.
TELLS_ITSELF = ("job-api", "server")
#: How long the checks wait for those tails (unit: s): a tail missing after it is an energy violation.
TAIL_WAIT_S = 30.0


def wait_for_tails(path: Path, before: int) -> None:
    """Wait (at most `TAIL_WAIT_S`) until every record after the first ``before`` has its tail."""
    deadline = time.monotonic() + TAIL_WAIT_S
    while time.monotonic() < deadline:
        records, _ = read_history(path)
        if all("tail" in r for r in records[before:]):
            return
        time.sleep(0.1)


def total(record: dict, key: str) -> float:
    """A record's energy or time over its whole span: until the judged point plus after it (``after_*``)."""
    return float(record.get(key) or 0.0) + float(record.get(f"after_{key}") or 0.0)


# -- Prometheus: the exposition parsed, and what the history says it should hold ----------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
#: Labels that tell two samples of one metric apart (the others name the job, its run directory and GPU).
KEY_LABELS = ("outcome", "quantity", "currency")


def parse_exposition(text: str) -> dict[str, float]:
    """Samples of a text exposition, keyed ``name{outcome=...}`` (only `KEY_LABELS` kept)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        keep = ",".join(f"{k}={labels[k]}" for k in KEY_LABELS if k in labels)
        name = m.group(1) + (f"{{{keep}}}" if keep else "")
        out[name] = out.get(name, 0.0) + float(m.group(4))
    return out


def expected_exposition(records: Sequence[dict]) -> dict[str, float]:
    """What the export of ``records`` must hold, computed here from the records alone."""
    out: dict[str, float] = {}
    for reason, n in Counter(str(r.get("stop_reason")) for r in records).items():
        out[f"zeus_run_trials_total{{outcome={reason}}}"] = float(n)
    recurrences = {int(r["recurrence"]) for r in records}
    reached = {int(r["recurrence"]) for r in records if r.get("reached")}
    if records:
        out["zeus_run_recurrences_total{outcome=reached}"] = float(len(reached))
        out["zeus_run_recurrences_open"] = float(len(recurrences - reached))
        out["zeus_run_energy_joules_total"] = sum(float(r.get("energy") or 0.0) for r in records)
        out["zeus_run_time_seconds_total"] = sum(float(r.get("time") or 0.0) for r in records)
        out["zeus_run_batch_size"] = float(records[-1]["batch_size"])
    return out


def compare_exposition(seen: dict[str, float], expected: dict[str, float]) -> list[tuple[str, str, str]]:
    """(metric, expected, seen) for each metric of ``expected`` that ``seen`` lacks or disagrees on, and for each
    trial outcome ``seen`` counts that the history does not have."""
    bad = []
    for name, want in sorted(expected.items()):
        got = seen.get(name)
        if got is None or abs(got - want) > 1e-6 * max(1.0, abs(want)):
            bad.append((name, _num(want), "absent" if got is None else _num(got)))
    for name, got in sorted(seen.items()):
        if name.startswith("zeus_run_trials_total") and name not in expected and got:
            bad.append((name, "absent (no such record)", _num(got)))
    return bad


def mismatches(bad: Sequence[tuple[str, str, str]], most: int = 4) -> str:
    """The first ``most`` disagreements, as ``metric: expected X, seen Y``."""
    text = "; ".join(f"{name} {want} != {got}" for name, want, got in bad[:most])
    return text + (f" (+{len(bad) - most} more)" if len(bad) > most else "")


def _num(v: float) -> str:
    return str(int(v)) if v == int(v) and abs(v) < 1e12 else f"{v:.6g}"


class Pushgateway:
    """A Pushgateway double: keeps the last body PUT or POSTed under each grouping key (in this process)."""

    def __init__(self) -> None:
        self.pushes: dict[tuple[str, str], tuple[float, str]] = {}
        self.count = 0
        gateway = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _store(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                gateway.store(self.path, body)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_PUT = do_POST = _store

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, name="pushgateway", daemon=True).start()

    def store(self, path: str, body: str) -> None:
        parts = path.split("/")[2:]  # metrics/job/zeus-run/job_name@base64/X/run_dir@base64/Y
        labels = {}
        for k, v in zip(parts[0::2], parts[1::2], strict=False):
            if k.endswith("@base64"):
                k, v = k[: -len("@base64")], base64.urlsafe_b64decode(v + "=" * (-len(v) % 4)).decode()
            labels[k] = v
        self.pushes[(labels.get("job_name", ""), labels.get("run_dir", ""))] = (time.time(), body)
        self.count += 1

    def last(self, job: str) -> str | None:
        bodies = [v for (name, _), v in self.pushes.items() if name == job]
        return max(bodies)[1] if bodies else None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- the machinery of faults ------------------------------------------------------------------------------


class Disk:
    """The run directory's filesystem: a small tmpfs (as root), which a fault fills up."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True)
        self.mounted = False
        self.why_not = ""
        if os.geteuid() != 0:
            self.why_not = "not root: no tmpfs to fill"
            return
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE},mode=0755", "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
        self.mounted = r.returncode == 0
        self.why_not = "" if self.mounted else f"mount failed: {r.stderr.strip()}"
        self.label = f"a {DISK_SIZE} tmpfs, filled mid-trial" if self.mounted else f"not injected ({self.why_not})"

    def fill(self) -> int:
        """Fill the filesystem to the last byte; returns the bytes written."""
        if not self.mounted:
            return 0
        written = 0
        with open(self.path / "filler", "wb", buffering=0) as f:
            for size in (1 << 20, 1 << 12, 1):
                block = b"\0" * size
                while True:
                    try:
                        written += f.write(block)
                    except OSError:
                        break
        return written

    def free(self) -> None:
        try:
            (self.path / "filler").unlink()
        except FileNotFoundError:
            pass

    def unmount(self, keep: Path | None) -> None:
        if keep is not None and (self.path / "root").exists():
            shutil.copytree(self.path / "root", keep, symlinks=True, dirs_exist_ok=True)
        if self.mounted:
            subprocess.run(["umount", str(self.path)], capture_output=True)
            self.mounted = False


class Clock:
    """The processes' wall clock: an offset file read by the LD_PRELOAD shim (scripts/job_life_clock.c)."""

    def __init__(self, work: Path) -> None:
        work.mkdir(parents=True)
        self.file = work / "offset"
        self.file.write_text("0\n")
        self.offset = 0.0
        self.lib = work / "clockstep.so"
        cc = shutil.which("cc") or shutil.which("gcc")
        self.why_not = "" if cc else "no C compiler (cc) to build scripts/job_life_clock.c"
        if cc:
            r = subprocess.run(
                [cc, "-shared", "-fPIC", "-O2", "-o", str(self.lib), str(CLOCK_SRC), "-ldl"],
                capture_output=True,
                text=True,
            )
            if r.returncode != 0:
                self.why_not = f"cc failed: {r.stderr.strip()[:200]}"
        self.ready = not self.why_not

    @property
    def label(self) -> str:
        return "CLOCK_REALTIME stepped by an LD_PRELOAD shim" if self.ready else f"not injected ({self.why_not})"

    def env(self) -> dict[str, str]:
        return {"LD_PRELOAD": str(self.lib), "JOB_LIFE_CLOCK_FILE": str(self.file)} if self.ready else {}

    def step(self, seconds: float) -> None:
        self.offset += seconds
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(f"{self.offset}\n")
        os.replace(tmp, self.file)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the life -----------------------------------------------------------------------------------------------


@dataclass
class Command:
    """One command the harness ran: what, its exit code (None: it hung and was killed), its output."""

    what: str
    rc: int | None
    log: Path
    seconds: float

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def error_line(self) -> str:
        lines = [ln.strip() for ln in self.output().splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith(("Error", "error", "ERROR")) or " ERROR " in ln]
        return (errors or lines or ["(no output)"])[-1][:240]


@dataclass
class NightLog:
    """What happened on one night."""

    night: Night
    commands: list[Command] = field(default_factory=list)
    injected: list[str] = field(default_factory=list)
    not_injected: list[str] = field(default_factory=list)
    busy: Command | None = None
    busy_started: bool = False
    orphan_pid: int | None = None  # the script a kill-launcher fault left running
    before: int = 0  # records before the night
    violations: list[Violation] = field(default_factory=list)


class Life:
    """The job, its doors, the faults and the checks."""

    def __init__(self, work: Path, seed: int, quiet: bool) -> None:
        self.work = work
        self.seed = seed
        self.quiet = quiet
        self.python = sys.executable
        zr = Path(sys.executable).with_name("zeus-run")
        self.zr = str(zr) if zr.exists() else ""
        self.logs = work / "logs"
        self.logs.mkdir(parents=True)
        self.state = work / "state"
        self.state.mkdir()
        self.disk = Disk(work / "disk")
        self.root = self.disk.path / "root"
        self.root.mkdir()
        self.run_dir = self.root / JOB
        self.clock = Clock(work / "clock")
        self.nvml = work / "nvml.json"
        self.t0 = boot_now()  # the double's counter starts here, one for every process
        self.marks = Marks(work / "gpu-marks.jsonl", idle_w=0.0)
        self.ledger = Ledger(work / "ledger.jsonl")
        self.gateway = Pushgateway()
        self.token_file = work / "secrets" / "zeus-token"
        self.token_file.parent.mkdir(mode=0o700)
        self.token_file.write_text(base64.urlsafe_b64encode(os.urandom(24)).decode() + "\n")
        self.token_file.chmod(0o600)
        self.port = free_port()
        self.server: subprocess.Popen | None = None
        self.server_log = self.logs / "server.log"
        self.server_log_pos = 0
        self.spec = work / "job" / "job.yaml"
        self.spec.parent.mkdir()
        self.spec.write_text(self.spec_text())
        self.nights: list[NightLog] = []
        self.checked: set[int] = set()  # history lines whose energy and time were checked
        self.checked_orphans: set[int] = set()  # history lines without a script, checked for energy
        self.lost_reported: set[tuple[int, float]] = set()
        self.procs: list[subprocess.Popen] = []

    def spec_text(self) -> str:
        return f"""# The job of scripts/job_life.py: one nightly job, every door.
name: {JOB}
command: [{json.dumps(self.python)}, {json.dumps(str(TRAIN))}]
batch_sizes: [16, 32, 64, 128]
default_batch_size: {DEFAULT_BATCH_SIZE}
target_metric: 0.9
max_epochs: 6
recurrences: null
max_tries: {MAX_TRIES}
lease: {LEASE_S}
seed: {self.seed}
energy: {{source: nvml}}
power_limit: {{enabled: false}}
run_dir: {json.dumps(str(self.run_dir))}
export:
  prometheus: {{push: {json.dumps(self.gateway.url)}}}
"""

    # -- processes ---------------------------------------------------------------------------------------
    def env(self, night: Night, door: str, **extra: str) -> dict[str, str]:
        env = {
            k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED" and not k.startswith(("ZEUS_", "MLFLOW_"))
        }
        env["PATH"] = f"{Path(self.python).parent}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
        env["PYTHONPATH"] = os.pathsep.join((str(FAKE_PYNVML), str(REPO)))  # this tree's zeus-run (check_the_checks)
        env["FAKE_NVML_NODES"] = str(self.nvml)
        env["JOB_LIFE_GPU_MARKS"] = str(self.marks.path)
        env["JOB_LIFE_PHASES"] = json.dumps(night.phases)
        env["JOB_LIFE_LEDGER"] = str(self.ledger.path)
        env["JOB_LIFE_STATE"] = str(self.state)
        env["JOB_LIFE_NIGHT"] = str(night.n)
        env["JOB_LIFE_DOOR"] = door
        env.update(self.clock.env())
        env.update(extra)
        return env

    def spawn(self, argv: Sequence[str], what: str, env: dict[str, str]) -> tuple[subprocess.Popen, Path, float]:
        log = self.logs / f"{what}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc, log, time.monotonic()

    def finish(self, proc: subprocess.Popen, log: Path, t0: float, what: str, timeout: float) -> Command:
        try:
            rc: int | None = proc.wait(timeout=max(timeout - (time.monotonic() - t0), 0.1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # our own child's session (start_new_session)
            proc.wait()
            rc = None
        return Command(what, rc, log, time.monotonic() - t0)

    def door_argv(self, door: str) -> tuple[list[str], dict[str, str]]:
        if door == "cron":
            return [self.zr, "run", str(self.spec), "--next", "-q"], {}
        if door == "exec":
            return [self.zr, "exec", "--job", str(self.spec), "-q"], {}
        if door == "ask":
            return [self.zr, "ask", str(self.spec), "--format", "json"], {}
        if door == "job-api":
            return [self.python, str(TRAIN), "--job", str(self.spec)], {}
        if door == "server":
            return [self.python, str(TRAIN)], {
                "ZEUS_SERVER": f"http://127.0.0.1:{self.port}",
                "ZEUS_SERVER_TOKEN_FILE": str(self.token_file),
                "ZEUS_SERVER_JOB": JOB,
                "ZEUS_SERVER_TIMEOUT": str(SERVER_TIMEOUT),
            }
        assert door == "ask-tell", door
        script = (
            'out=$(zeus-run ask "$JOB_LIFE_SPEC" --format env) || exit $?\n'
            'eval "$out"\n'
            'python "$JOB_LIFE_TRAIN" > "$JOB_LIFE_TRAIN_LOG" 2>&1\n'
            'zeus-run tell "$ZEUS_RUN_DIR" "$ZEUS_ASK_TOKEN" --exit-code $?\n'
        )
        return ["sh", "-c", script], {"JOB_LIFE_SPEC": str(self.spec), "JOB_LIFE_TRAIN": str(TRAIN)}

    # -- the server --------------------------------------------------------------------------------------
    def start_server(self) -> str:
        if self.server is not None and self.server.poll() is None:
            return ""
        env = self.env(Night(0, "server"), "server")
        argv = [self.zr, "serve", "--root", str(self.root), "--port", str(self.port)]
        argv += ["--token-file", str(self.token_file), "-v"]
        with open(self.server_log, "ab") as out:
            self.server = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.server.poll() is not None:
                return f"zeus-run serve exited {self.server.returncode} at start (see {self.server_log})"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/health", timeout=2) as r:
                    if r.status == 200:
                        return ""
            except OSError:
                time.sleep(0.1)
        return "zeus-run serve did not answer /v1/health within 60 s"

    def stop_server(self, sig: int) -> int | None:
        if self.server is None or self.server.poll() is not None:
            return None
        self.server.send_signal(sig)
        try:
            return self.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.server.kill()
            return self.server.wait()

    # -- one night --------------------------------------------------------------------------------------------
    def live(self, night: Night) -> NightLog:
        log = NightLog(night)
        log.before = len(read_history(self.run_dir / "history.jsonl")[0])
        tmp = self.nvml.with_suffix(".tmp")
        gpu = {"draw_w": night.draw_w, "marks": str(self.marks.path), "t0": self.t0}
        gpu.update(update_ms=night.update_ms, sample_share=SAMPLE_SHARE)
        tmp.write_text(json.dumps({"local": {"gpus": [gpu]}}))
        os.replace(tmp, self.nvml)
        with open(self.marks.path, "a", encoding="utf-8") as f:  # the GPU idles until the night's script starts
            f.write(json.dumps({"t": boot_now(), "w": night.idle_w, "by": "harness"}) + "\n")
        oom = self.state / "oom"
        if "oom" in night.faults:
            oom.write_text("exit" if night.oom_exit else "raise")
            log.injected.append(f"oom ({'printed, then sys.exit(1)' if night.oom_exit else 'raised'} on every try)")
        if night.door == "server" or "restart" in night.faults:
            if "restart" in night.faults and self.server is not None:
                rc = self.stop_server(signal.SIGTERM)
                log.injected.append(f"restart (the server stopped by SIGTERM, exit {rc})")
                if rc != 0:
                    log.violations.append(
                        Violation(
                            "clean", night.n, "server", "-", "the server to stop on SIGTERM with exit 0", f"exit {rc}"
                        )
                    )
            problem = self.start_server()
            if problem:
                log.violations.append(Violation("clean", night.n, "server", "-", "the server to start", problem))
        try:
            if night.door == "cron":
                self._cron_night(night, log)
            else:
                self._asked_night(night, log)
        finally:
            oom.unlink(missing_ok=True)
            self.disk.free()
            if self.clock.offset:
                self.clock.step(-self.clock.offset)
                log.injected.append("the wall clock set right again at the end of the night")
        self._let_the_day_pass(log)
        return log

    def _let_the_day_pass(self, log: NightLog) -> None:
        """A night is a day: where one leaves a trial in flight (``running.json``: a lost tell, a dead client),
        wait out its lease, as the day until the next trigger would (the nights here follow each other at once)."""
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while any(r.alive for r in self.ledger.snapshot()) and time.monotonic() < deadline:
            time.sleep(0.1)
        if (self.run_dir / "running.json").exists():
            time.sleep(LEASE_S + 2.0)
            log.injected.append(
                f"running.json names a trial in flight: the day passes (waited the lease, {LEASE_S:.0f} s)"
            )

    def _cron_night(self, night: Night, log: NightLog) -> None:
        cmd = self._try(night, log, "cron", 1, first=True)
        if "kill-launcher" in night.faults and cmd.rc == -signal.SIGKILL:
            restart = self._try(night, log, "cron", 2, first=False, what="restart")
            del restart

    def _asked_night(self, night: Night, log: NightLog) -> None:
        for i in range(1, MAX_TRIES + 1):
            n_before = len(read_history(self.run_dir / "history.jsonl")[0])
            cmd = self._try(night, log, night.door, i, first=i == 1)
            records = read_history(self.run_dir / "history.jsonl")[0][n_before:]
            if cmd.rc is None or cmd.rc in (2, 3, 4, 75) or not records or any(r.get("reached") for r in records):
                return
            if "full-disk" in night.faults:
                return  # a retry does not free the disk

    def _try(self, night: Night, log: NightLog, door: str, i: int, first: bool, what: str = "") -> Command:
        """One command of the night's door; on the night's first, the faults that strike mid-trial."""
        argv, extra = self.door_argv(door)
        env = self.env(night, door, **extra)
        if door == "ask-tell":
            env["JOB_LIFE_TRAIN_LOG"] = str(self.logs / f"n{night.n:02d}-{i}-train.log")
        name = f"n{night.n:02d}-{i}-{what or door}"
        mid = [f for f in night.faults if f in ("busy", "kill-launcher", "kill-server", "full-disk", "clock-jump")]
        hold = self.state / f"hold-{door}"
        if first and mid:
            hold.touch()  # the script waits in its first epoch until the faults have struck
        t_launch = boot_now()
        proc, out, t0 = self.spawn(argv, name, env)
        if first and mid:
            try:
                run = self.ledger.wait(
                    lambda r: (
                        r.night == night.n and r.door == door and r.start >= t_launch - 0.05 and r.trial_at is not None
                    ),
                    COMMAND_TIMEOUT,
                    proc,
                )
                if run is None:
                    log.not_injected += [f"{f} (no trial started)" for f in mid]
                else:
                    self._strike(night, log, proc, run, mid)
            finally:
                hold.unlink(missing_ok=True)
            if run is not None and "kill-launcher" in mid and not self.ledger.wait_ended(run.pid, COMMAND_TIMEOUT):
                log.violations.append(
                    Violation(
                        "clean",
                        night.n,
                        door,
                        trial_name(run.recurrence, run.attempt),
                        "the orphan to end",
                        "it ran on",
                    )
                )
        cmd = self.finish(proc, out, t0, name, COMMAND_TIMEOUT)
        log.commands.append(cmd)
        return cmd

    def _strike(self, night: Night, log: NightLog, proc: subprocess.Popen, run: Run, faults: list[str]) -> None:
        for fault in faults:
            if fault == "busy":
                self._busy(night, log)
            elif fault == "clock-jump":
                if self.clock.ready:
                    self.clock.step(night.clock_step)
                    log.injected.append(f"clock-jump: the wall clock stepped {night.clock_step:+.0f} s mid-trial")
                else:
                    log.not_injected.append(f"clock-jump: {self.clock.why_not}")
            elif fault == "full-disk":
                if self.disk.mounted:
                    log.injected.append(f"full-disk ({self.disk.fill()} bytes filled it)")
                else:
                    log.not_injected.append(f"full-disk: {self.disk.why_not}")
            elif fault == "kill-launcher":
                log.orphan_pid = run.pid
                os.kill(proc.pid, signal.SIGKILL)
                log.injected.append(f"kill-launcher (kill -9 {proc.pid}; its script {run.pid} runs on)")
                proc.wait()
            elif fault == "kill-server" and self.server is not None:
                pid = self.server.pid
                self.server.kill()
                self.server.wait()
                log.injected.append(f"kill-server (kill -9 {pid} mid-trial; started again after 1 s)")
                time.sleep(1.0)
                problem = self.start_server()
                if problem:
                    log.violations.append(
                        Violation("clean", night.n, "server", "-", "the server to start again", problem)
                    )

    def _busy(self, night: Night, log: NightLog) -> None:
        door = night.busy_door
        argv, extra = self.door_argv(door)
        env = self.env(night, "busy", **extra)
        t_launch = boot_now()
        proc, out, t0 = self.spawn(argv, f"n{night.n:02d}-busy-{door}", env)
        log.busy = self.finish(proc, out, t0, f"busy {door}", BUSY_TIMEOUT)
        log.busy_started = any(r.door == "busy" and r.start >= t_launch - 0.05 for r in self.ledger.snapshot())
        if door == "ask" and log.busy.rc == 0:  # it asked: release the ask, as its operator would, so it blocks nothing
            token = re.search(r'"token":\s*"([^"]+)"', log.busy.output())
            if token:
                env = self.env(night, "busy")
                proc, out, t0 = self.spawn(
                    [self.zr, "cancel", str(self.run_dir), token.group(1)], f"n{night.n:02d}-busy-cancel", env
                )
                self.finish(proc, out, t0, "cancel", COMMAND_TIMEOUT)
        log.injected.append(f"busy ({door} while the trial ran: exit {log.busy.rc})")

    # -- the checks ---------------------------------------------------------------------------------------------
    def check(self, log: NightLog) -> list[Violation]:
        night = log.night
        v = log.violations
        if night.door in TELLS_ITSELF:
            wait_for_tails(self.run_dir / "history.jsonl", log.before)
        records, torn = read_history(self.run_dir / "history.jsonl")
        if torn:
            v.append(Violation("accounted", night.n, night.door, "-", "a history of whole JSON lines", torn))
        runs = self.ledger.snapshot()
        self._check_wedge(log, records, v)
        self._check_accounted(log, records, runs, v)
        self._check_measurements(log, records, runs, v)
        self._check_verdicts(log, records, runs, v)
        self._check_orphan(log, records, runs, v)
        self._check_busy(log, v)
        self._check_clean(log, v)
        # The audit and the offline export read the run directory side by side (two processes).
        audit = self._start_audit(log)
        self._check_exports(log, records, v)
        self._check_audit(log, audit, v)
        return v

    def _check_wedge(self, log: NightLog, records: list[dict], v: list[Violation]) -> None:
        night = log.night
        if not night.expects_reach:
            return
        before = records[: log.before]
        reached_before = {int(r["recurrence"]) for r in before if r.get("reached")}
        last = max((int(r["recurrence"]) for r in before), default=0)
        new = sorted({int(r["recurrence"]) for r in records[log.before :] if r.get("reached")} - reached_before)
        want = f"recurrence {last + 1}" if last in reached_before or last == 0 else f"recurrence {last} or {last + 1}"
        last_cmd = log.commands[-1] if log.commands else None
        if not new:
            got = ", ".join(
                f"{trial_name(r['recurrence'], r['attempt'])} {r['stop_reason']}" for r in records[log.before :]
            )
            why = "" if last_cmd is None else f"; {last_cmd.what} exited {last_cmd.rc}: {last_cmd.error_line()}"
            v.append(
                Violation(
                    "wedge",
                    night.n,
                    night.door,
                    "-",
                    f"{want} reached",
                    f"no recurrence reached ({got or 'no record'}){why}",
                )
            )
            return
        left_open = last not in reached_before and last > 0
        # A `run --next` trigger that takes over a dead launcher's trial counts it as that launcher's night, and
        # runs its own too, where it started at least half the job's slot ago (`zeus_run.door.calendar`: here the
        # slot is the life's own pace, nights back to back), so a night whose launcher was killed and triggered
        # again, and the night after one left open, may reach two.
        two = left_open or "kill-launcher" in night.faults
        first = last if left_open else last + 1
        ok = new in ([first], [last + 1], [first, first + 1]) if two else new == [last + 1]
        if not ok:
            v.append(Violation("wedge", night.n, night.door, "-", f"{want} reached", f"recurrence(s) {new} reached"))
        if last_cmd is not None and last_cmd.rc != 0:
            v.append(
                Violation(
                    "wedge",
                    night.n,
                    night.door,
                    "-",
                    f"{last_cmd.what} to exit 0 (a model)",
                    f"exit {last_cmd.rc}: {last_cmd.error_line()}",
                )
            )

    def _check_accounted(self, log: NightLog, records: list[dict], runs: list[Run], v: list[Violation]) -> None:
        night = log.night

        def bad(trial: str, expected: str, seen: str) -> None:
            v.append(Violation("accounted", night.n, night.door, trial, expected, seen))

        recurrences = sorted({int(r["recurrence"]) for r in records})
        if recurrences and recurrences != list(range(1, recurrences[-1] + 1)):
            missing = sorted(set(range(1, recurrences[-1] + 1)) - set(recurrences))
            bad("-", "recurrences 1..R, none missing", f"recurrence(s) {missing} missing")
        keys = Counter((int(r["recurrence"]), int(r["attempt"])) for r in records)
        for (rec, att), n in sorted(keys.items()):
            if n > 1:
                bad(trial_name(rec, att), "one record", f"{n} records")
        numbers = Counter(int(r["trial"]) for r in records)
        for t, n in sorted(numbers.items()):
            if n > 1:
                bad(f"trial #{t}", "one record per trial number", f"{n} records")
        if numbers and sorted(numbers) != list(range(len(numbers))):
            bad(
                "-",
                f"trial numbers 0..{len(numbers) - 1}",
                f"{sorted(set(range(max(numbers) + 1)) - set(numbers))} missing",
            )
        tries: dict[int, list[int]] = defaultdict(list)
        reached: Counter[int] = Counter()
        for r in records:
            tries[int(r["recurrence"])].append(int(r["attempt"]))
            reached[int(r["recurrence"])] += bool(r.get("reached"))
        for rec, atts in sorted(tries.items()):
            if sorted(set(atts)) != list(range(1, max(atts) + 1)):
                bad(f"r{rec:04d}", f"tries 1..{max(atts)}", f"tries {sorted(atts)}")
            if reached[rec] > 1:
                bad(f"r{rec:04d}", "one reached trial", f"{reached[rec]} reached trials")
        # Every script that got a trial has one record; every record has its script, or claims no energy.
        pairs, lost, orphans = pair(records, runs)
        del pairs
        for run in lost:
            grace = any(f in ("kill-launcher", "full-disk") for f in self.night_faults(run.night))
            if run.alive or (grace and run.night == night.n) or (run.pid, run.start) in self.lost_reported:
                continue
            self.lost_reported.add((run.pid, run.start))
            bad(
                trial_name(run.recurrence, run.attempt),
                f"a record of the script that ran it (pid {run.pid}, night {run.night}, {run.door})",
                "no record",
            )
        for i in orphans:
            r = records[i]
            if i in self.checked_orphans:
                continue
            self.checked_orphans.add(i)
            if total(r, "energy") > NO_SCRIPT_ENERGY:
                bad(
                    trial_name(r["recurrence"], r["attempt"]),
                    "no energy for a record whose script never ran (the ledger has none)",
                    f"{total(r, 'energy'):.1f} J ({r['stop_reason']}, {r.get('energy_method')})",
                )

    def night_faults(self, n: int) -> tuple[str, ...]:
        return next((log.night.faults for log in self.nights if log.night.n == n), ())

    def _check_measurements(self, log: NightLog, records: list[dict], runs: list[Run], v: list[Violation]) -> None:
        nights = {lg.night.n: lg.night for lg in self.nights}
        nights[log.night.n] = log.night
        pairs, _, _ = pair(records, runs)
        powers = measured_powers(records)
        for i, run in pairs:
            if i in self.checked or run.span is None:
                continue
            self.checked.add(i)
            r = records[i]
            night = nights.get(run.night, log.night)
            drew = run.drew(self.marks, night.update_ms)
            if drew is None:
                continue
            if lost_to_full_disk(r, self.night_faults(run.night)) and r.get("energy_source") != "unmeasured":
                name = trial_name(r["recurrence"], r["attempt"])
                v.append(
                    Violation(
                        "energy",
                        run.night,
                        run.door,
                        name,
                        f"a lease expired on a full disk charged its span, imputed ({drew.joules:.0f} J by the ledger)",
                        f"{total(r, 'energy'):.1f} J over {total(r, 'time'):.2f} s ({r.get('energy_source')})",
                    )
                )
                continue
            v += measure(r, run, drew, powers)

    def _check_verdicts(self, log: NightLog, records: list[dict], runs: list[Run], v: list[Violation]) -> None:
        night = log.night
        pairs, _, _ = pair(records, runs)
        for i, run in pairs:
            if run.night != night.n:
                continue
            r = records[i]
            name = trial_name(r["recurrence"], r["attempt"])
            cause = f"{r.get('cause') or ''} {r.get('message') or ''}"
            if "oom" in night.faults:
                seen = (r.get("stop_reason"), r.get("observed"), r.get("exit_code"), "out of memory" in cause.lower())
                if seen != ("crashed", True, 1, True):
                    v.append(
                        Violation(
                            "verdicts",
                            night.n,
                            run.door,
                            name,
                            "an OOM: crashed, observed, exit code 1, the OOM line in its cause",
                            f"{r.get('stop_reason')}, observed {r.get('observed')}, exit code {r.get('exit_code')}, cause {cause.strip()[:120]!r}",
                        )
                    )
            infra = [f for f in night.faults if f in ("full-disk", "kill-launcher", "kill-server")]
            if infra and r.get("stop_reason") == "crashed" and r.get("observed"):
                v.append(
                    Violation(
                        "verdicts",
                        night.n,
                        run.door,
                        name,
                        f"no observed crash of batch size {r.get('batch_size')} for a {infra[0]} (not the batch size's fault)",
                        f"crashed, observed, exit code {r.get('exit_code')}, cause {cause.strip()[:160]!r}",
                    )
                )

    def _check_orphan(self, log: NightLog, records: list[dict], runs: list[Run], v: list[Violation]) -> None:
        night = log.night
        if "kill-launcher" not in night.faults or not log.orphan_pid:
            return
        orphan = next((r for r in runs if r.pid == log.orphan_pid and r.night == night.n), None)
        if orphan is None or orphan.alive:
            return  # the clean invariant says it ran on
        name = trial_name(orphan.recurrence, orphan.attempt)

        def bad(expected: str, seen: str) -> None:
            v.append(Violation("orphan", night.n, orphan.door, name, expected, seen))

        if orphan.exit_code != 0:
            bad("the orphan to run to its end (exit 0)", f"exit {orphan.exit_code}: {orphan.error or 'no exit line'}")
            return
        mine = [r for r in records if (r.get("recurrence"), r.get("attempt")) == (orphan.recurrence, orphan.attempt)]
        if not mine:
            return  # the accounted invariant names it
        rec = mine[-1]
        if bool(rec.get("reached")) != bool(orphan.reached):
            bad(
                f"its record to say reached {bool(orphan.reached)} (as its script's last line does: adopted)",
                f"{rec.get('stop_reason')}, reached {rec.get('reached')}",
            )
        again = [
            r
            for r in runs
            if r.pid != orphan.pid
            and r.night == night.n
            and r.recurrence == orphan.recurrence
            and r.start > orphan.start
        ]
        if orphan.reached and again:
            bad("no script to run a recurrence its orphan reached again", f"{len(again)} more script(s) ran it")

    def _check_busy(self, log: NightLog, v: list[Violation]) -> None:
        if log.busy is None:
            return
        n, door = log.night.n, f"busy {log.night.busy_door}"
        if log.busy.rc != 75:
            v.append(
                Violation(
                    "busy",
                    n,
                    door,
                    "-",
                    "exit 75 at once (nothing done)",
                    f"exit {log.busy.rc}: {log.busy.error_line()}",
                )
            )
        if log.busy_started:
            v.append(Violation("busy", n, door, "-", "no script started", "it started a script"))

    def _check_clean(self, log: NightLog, v: list[Violation]) -> None:
        for cmd in [*log.commands, *([log.busy] if log.busy else [])]:
            if cmd.rc is None:
                v.append(
                    Violation(
                        "clean", log.night.n, cmd.what, "-", f"to end within {COMMAND_TIMEOUT:.0f} s", "it hung; killed"
                    )
                )
            # zeus-run's commands; a script's (job-api, server) traceback is the script's, the API raising to it
            tb = "" if cmd.what.endswith(("-job-api", "-server")) else zeus_traceback(cmd.output())
            if tb:
                v.append(Violation("clean", log.night.n, cmd.what, "-", "no traceback from zeus-run's code", tb))
        try:
            with open(self.server_log, "rb") as f:
                f.seek(self.server_log_pos)
                text = f.read().decode(errors="replace")
                self.server_log_pos = f.tell()
        except OSError:
            text = ""
        tb = zeus_traceback(text)
        if tb:
            v.append(Violation("clean", log.night.n, "server", "-", "no traceback in the server's log", tb))
        answered = server_errors(text)
        if answered:
            v.append(Violation("clean", log.night.n, "server", "-", "no answer 500 in the server's log", answered))

    def _start_audit(self, log: NightLog) -> tuple[subprocess.Popen, Path, float] | None:
        if not (self.run_dir / "history.jsonl").exists():
            return None
        env = self.env(log.night, "audit")
        return self.spawn([self.zr, "replay", str(self.run_dir)], f"n{log.night.n:02d}-replay", env)

    def _check_audit(
        self, log: NightLog, audit: tuple[subprocess.Popen, Path, float] | None, v: list[Violation]
    ) -> None:
        if audit is None:
            return
        cmd = self.finish(*audit, "replay", COMMAND_TIMEOUT)
        if cmd.rc != 0:
            v.append(
                Violation(
                    "audit",
                    log.night.n,
                    log.night.door,
                    "-",
                    "zeus-run replay exit 0",
                    f"exit {cmd.rc}: {audit_line(cmd.output())}",
                )
            )

    def _check_exports(self, log: NightLog, records: list[dict], v: list[Violation]) -> None:
        if not records:
            return
        want = expected_exposition(records)
        n, door = log.night.n, log.night.door
        live = self.gateway.last(JOB)
        if live is None:
            v.append(Violation("exports", n, door, "live push", "a push of the job's metrics", "none yet"))
        else:
            seen = parse_exposition(live)
            bad = compare_exposition(seen, want)
            if bad:
                pushed = int(sum(x for k, x in seen.items() if k.startswith("zeus_run_trials_total")))
                doors = self.record_doors(records)
                late = ", ".join(
                    f"{trial_name(r['recurrence'], r['attempt'])} ({doors.get(i, '?')})"
                    for i, r in enumerate(records)
                    if i >= pushed
                )
                v.append(
                    Violation(
                        "exports",
                        n,
                        door,
                        "live push",
                        f"the history's {len(records)} trials",
                        f"the last push holds {pushed}"
                        + (f", none of {late}" if late else "")
                        + f": {mismatches(bad)}",
                    )
                )
        out = self.work / "exports" / "nightly.prom"
        out.parent.mkdir(exist_ok=True)
        env = self.env(log.night, "export")
        proc, o, t0 = self.spawn(
            [self.zr, "export", "prometheus", str(self.run_dir), "-o", str(out)], f"n{n:02d}-export", env
        )
        cmd = self.finish(proc, o, t0, "export prometheus", COMMAND_TIMEOUT)
        if cmd.rc != 0 or not out.exists():
            v.append(
                Violation(
                    "exports", n, door, "export prometheus", "exit 0 and a file", f"exit {cmd.rc}: {cmd.error_line()}"
                )
            )
            return
        bad = compare_exposition(parse_exposition(out.read_text()), want)
        if bad:
            v.append(Violation("exports", n, door, "export prometheus", "the history's figures", mismatches(bad)))

    def record_doors(self, records: list[dict]) -> dict[int, str]:
        """The door each record came through, where the ledger knows (its script's door)."""
        pairs, _, _ = pair(records, self.ledger.snapshot())
        return {i: run.door for i, run in pairs}

    # -- the end ------------------------------------------------------------------------------------------------
    def close(self, keep: bool) -> None:
        if self.server is not None:
            self.stop_server(signal.SIGTERM)
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for run in self.ledger.snapshot():  # a script still running (it should not be): ours, by its pid
            if run.alive and _start_ticks(run.pid) is not None:
                try:
                    os.kill(run.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.ledger.close()
        self.gateway.close()
        self.disk.unmount(self.work / "run-dir" if keep else None)


# -- the true saving, from the harness's own ledger ----------------------------------------------------------
#: Stop reasons no batch size caused: what their scripts spent, the default would have spent too.
UNOBSERVED = ("interrupted", "infrastructure", "environment_error", "config_error")


def _train_constants() -> tuple[float, float, dict[int, float], dict[int, int]]:
    """The training script's known cost: start-up, save, seconds per epoch and epochs to the target per batch size."""
    spec = importlib.util.spec_from_file_location("job_life_train", TRAIN)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.STARTUP, mod.SAVE, dict(mod.EPOCH_S), dict(mod.REACH)


def true_sides(
    records: Sequence[dict], runs: Sequence[Run], draws: dict[int, float], b0: int
) -> dict[str, tuple[float, float]] | None:
    """What zeus-run really spent and what always running ``b0`` would have, ``{energy, time: (spent, default)}``.

    From the harness's ledger alone: zeus-run's side is every script's span (times the night's draw for
    energy). The default's side: for each recurrence that reached the target, one run of ``b0`` at its known
    cost (the script's start-up and ``b0``'s epochs to the target at its seconds per epoch; a reached run's save,
    after the target, is out of both sides as ``after_time`` is out of zeus-run's totals), plus what a
    launch adds beyond the script's own time (the median over the reached runs), at the draw of the night it
    reached on; the tries that would have hit the default too (`hits_default`: an environment error, a lost node,
    a try at or below ``b0`` of a recurrence that never reached) on both sides, as they ran. None before the
    default's cost can be stated (no reached run yet).
    """
    startup, save, epoch_s, reach = _train_constants()

    def model(bs: int) -> float:  # to the point a run is judged at: its save comes after (``after_time``)
        return startup + reach.get(bs, 0) * epoch_s.get(bs, 0.0)

    pairs, lost, _ = pair(records, runs)
    by_run = {id(run): records[i] for i, run in pairs}
    done = [run for run in runs if run.span is not None]
    extra = sorted(
        run.span - save - model(int(run.batch_size))  # type: ignore[operator]
        for run in done
        if run.reached and run.batch_size in reach and reach[int(run.batch_size)] > 0
    )
    if not extra:
        return None
    overhead = extra[len(extra) // 2]
    reached_on: dict[int, int] = {}
    for run in done:
        if run.reached and run.recurrence is not None:
            reached_on.setdefault(int(run.recurrence), run.night)
    spent_e = spent_t = default_e = default_t = 0.0
    for run in done:
        # A reached run's save is after the point it was judged at: out of the saving, as zeus-run counts it.
        span, draw = float(run.span or 0.0) - (save if run.reached else 0.0), draws.get(run.night, 0.0)
        spent_e, spent_t = spent_e + span * draw, spent_t + span
        record = by_run.get(id(run))
        if hits_default(record, run, b0, reached_on):
            default_e, default_t = default_e + span * draw, default_t + span
    one = model(b0) + overhead
    for _, night in reached_on.items():
        default_e, default_t = default_e + one * draws.get(night, 0.0), default_t + one
    del lost
    return {"energy": (spent_e, default_e), "time": (spent_t, default_t)}


#: Unobserved ends that hit the default's job too (an environment error, a lost node); an interrupted launcher or
#: zeus-run's own spec error would not (`zeus_run.views.nights.hits_default`).
HITS_DEFAULT = ("environment_error", "infrastructure")


def hits_default(record: dict | None, run: Run, b0: int, reached_on: dict[int, int]) -> bool:
    """Whether always running ``b0`` would have spent this try too: the one rule for bad nights (docs/savings.md).

    An environment error or a lost node (and a try zeus-run kept no record of) would have hit the default; on a
    night no batch size reached (this harness's out-of-memory and full-disk faults hit every batch size), a try at
    or below ``b0`` would have (the default needs at least its memory); a failure above ``b0``, an interrupted
    launcher or a spec error would not.
    """
    if record is None:
        return True
    reason = record.get("stop_reason")
    if reason in HITS_DEFAULT:
        return True
    if reason in UNOBSERVED:
        return False
    never = run.recurrence is not None and int(run.recurrence) not in reached_on
    return never and run.batch_size is not None and int(run.batch_size) <= b0


@dataclass
class Coverage:
    """How often ``history``'s stated 90% interval held the true saving, night by night."""

    held: Counter = field(default_factory=Counter)
    judged: Counter = field(default_factory=Counter)
    unbounded: Counter = field(default_factory=Counter)
    misses: list[str] = field(default_factory=list)

    def add(self, other: Coverage) -> None:
        self.held.update(other.held)
        self.judged.update(other.judged)
        self.unbounded.update(other.unbounded)
        self.misses += other.misses

    def line(self) -> str:
        parts = []
        for q in ("energy", "time"):
            n, k = self.judged[q], self.held[q]
            share = f"{k / n * 100:.1f}%" if n else "-"
            parts.append(f"{q} {k}/{n} ({share}; {self.unbounded[q]} nights without an interval yet)")
        return "saving: the stated 90% interval held the true saving (the ledger's) on " + ", ".join(parts)


def check_saving(life: Life, night: int, records: Sequence[dict], cov: Coverage) -> None:
    """After a night: does ``history``'s stated 90% interval of the energy and time saving hold the true one?"""
    draws = {lg.night.n: float(lg.night.draw_w) for lg in life.nights}
    sides = true_sides(records, life.ledger.snapshot(), draws, DEFAULT_BATCH_SIZE)
    if sides is None:
        return
    out = subprocess.run(
        [life.zr, "history", str(life.run_dir), "--format", "json"],
        capture_output=True,
        text=True,
        env=life.env(life.nights[-1].night, "history"),
        timeout=COMMAND_TIMEOUT,
    )
    if out.returncode != 0:
        return
    saved = json.loads(out.stdout).get("summary", {}).get("saved", {})
    for q, (spent, default) in sides.items():
        stated = saved.get(q)
        if not stated or default <= 0:
            continue
        truth = 1.0 - spent / default
        ci = stated.get("ci")
        if ci is None:
            cov.unbounded[q] += 1
            continue
        cov.judged[q] += 1
        if ci[0] - 1e-9 <= truth <= ci[1] + 1e-9:
            cov.held[q] += 1
        else:
            cov.misses.append(
                f"night {night}: {q} true saving {truth * 100:.1f}% outside the stated {ci[0] * 100:.1f}% to "
                f"{ci[1] * 100:.1f}% (stated {stated.get('value', 0) * 100:.1f}%)"
            )


def pair(records: Sequence[dict], runs: Sequence[Run]) -> tuple[list[tuple[int, Run]], list[Run], list[int]]:
    """Records matched with the scripts that ran them, by (recurrence, try), each in order; the scripts that got a
    trial and have no record; the records no script ran."""
    by_key: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        by_key[(int(r["recurrence"]), int(r["attempt"]))].append(i)
    runs_by_key: dict[tuple[int, int], list[Run]] = defaultdict(list)
    for run in sorted(runs, key=lambda r: r.start):
        if run.key is not None:
            runs_by_key[run.key].append(run)
    pairs, lost, orphans = [], [], []
    for key in sorted(set(by_key) | set(runs_by_key)):
        idx, rs = by_key.get(key, []), runs_by_key.get(key, [])
        pairs += list(zip(idx, rs, strict=False))
        lost += rs[len(idx) :]
        orphans += idx[len(rs) :]
    return pairs, lost, sorted(orphans)


def lost_to_full_disk(record: dict, faults: Sequence[str]) -> bool:
    """Whether ``record`` is a trial whose tell a full disk lost: its lease expired on a full-disk night, so no
    measurement of it ever reached zeus-run (the summary lists it instead of an energy violation)."""
    lease = bool((record.get("provenance") or {}).get("lease_expired"))
    return "full-disk" in faults and record.get("stop_reason") == "infrastructure" and lease


def measured_powers(records: Sequence[dict]) -> list[float]:
    """The power (energy / time, unit: W) of each record a meter measured: what an imputed energy is held to."""
    out = []
    for r in records:
        t, e = total(r, "time"), total(r, "energy")
        if r.get("energy_source") != "unmeasured" and t > 0 and e > 0:
            out.append(e / t)
    return out


def measure(record: dict, run: Run, truth: float | Draw, powers: Sequence[float] = ()) -> list[Violation]:
    """The energy and time invariants of one record against its script's span in the ledger (``run``) and what the
    GPU drew over it (``truth``: a `Draw` by the marks, or a constant draw in W): both within `TOLERANCE` of the
    ledger (plus the counter's honest slack), the part after the judged point included. A record no meter read
    (``energy_source: unmeasured``: imputed) is held to its time, and its power (energy / time) to the range of
    the job's measured trials' ``powers`` (unit: W), within `TOLERANCE`: an imputation from them lies there."""
    out: list[Violation] = []
    span = run.span
    if span is None:
        return out
    if not isinstance(truth, Draw):
        truth = Draw(truth * span, 0.0, f"{truth:g} W x {span:.2f} s")
    r = record
    name = trial_name(r["recurrence"], r["attempt"])
    want_e, seen_e = truth.joules, total(r, "energy")
    tail = run.exit_seen - run.exit_line if run.exit_seen is not None and run.exit_line is not None else None
    of = f", {tail:.2f} s of it after the script's last statement" if tail is not None else ""
    if run.told is not None:  # asked and told from inside the process
        of = f", less its ask ({run.ask_s:.2f} s) and its tell"
    how = f"{r.get('stop_reason')}, {r.get('energy_source')}/{r.get('energy_method')}"
    imputed = r.get("energy_source") == "unmeasured"
    seen_t = total(r, "time")
    if imputed:
        watts = seen_e / seen_t if seen_t > 0 else 0.0
        lo, hi = (min(powers), max(powers)) if powers else (0.0, float("inf"))
        if seen_e <= 0 or not lo * (1 - TOLERANCE) <= watts <= hi * (1 + TOLERANCE):
            out.append(
                Violation(
                    "energy",
                    run.night,
                    run.door,
                    name,
                    "an imputed energy above 0 at a power the job's measured trials drew"
                    + (f" ({lo:.0f}-{hi:.0f} W)" if powers else ""),
                    f"{seen_e:.1f} J over {seen_t:.2f} s: {watts:.1f} W ({how})",
                )
            )
    if not imputed and abs(seen_e - want_e) > TOLERANCE * want_e + truth.slack:
        parts = f"energy {float(r.get('energy') or 0):.1f} + after {float(r.get('after_energy') or 0):.1f}"
        slack = f", +-{truth.slack:.1f} J for the counter's updates" if truth.slack else ""
        out.append(
            Violation(
                "energy",
                run.night,
                run.door,
                name,
                f"{want_e:.1f} J (ledger: {truth.how}{of}{slack})",
                f"{seen_e:.1f} J ({parts}; {how}): {100 * (seen_e / want_e - 1):+.1f}%",
            )
        )
    # A lease that expired (a tell a full disk lost) is charged what zeus-run saw of it: from the ask to its
    # last sign of life, which a script that asks for itself starts after its start-up, and a full disk ends early.
    expired = bool((r.get("provenance") or {}).get("lease_expired"))
    if expired and not 0 < seen_t <= span * (1 + TOLERANCE):
        out.append(
            Violation(
                "time",
                run.night,
                run.door,
                name,
                f"an expired lease charged a span above 0 s and within its process's {span:.2f} s",
                f"{seen_t:.2f} s ({r.get('stop_reason')})",
            )
        )
    elif not expired and abs(seen_t - span) > TOLERANCE * span:
        parts = f"time {float(r.get('time') or 0):.2f} + after {float(r.get('after_time') or 0):.2f}"
        out.append(
            Violation(
                "time",
                run.night,
                run.door,
                name,
                f"{span:.2f} s (the script's process, start to exit{of})",
                f"{seen_t:.2f} s ({parts}; {r.get('stop_reason')}): {100 * (seen_t / span - 1):+.1f}%",
            )
        )
    return out


_TRACEBACK = re.compile(r"(?m)^([ \t]*)Traceback \(most recent call last\):[ \t]*$")
#: A server's answer 500 in its log (zeus-run's: ``POST /v1/... 500 2.3 ms``; uvicorn's: ``"POST /v1/... HTTP/1.1" 500``).
_HTTP_500 = re.compile(r'\b(?:GET|POST|PUT|PATCH|DELETE) (/\S*?)(?: HTTP/[\d.]+")? 500\b')


def zeus_traceback(text: str) -> str:
    """The last line of a Python traceback whose frames include zeus-run's own code, if ``text`` has one. A
    traceback may be indented (a server's log indents its exceptions, chained ones included): its frames are the
    lines indented past its ``Traceback`` line, and its error the first line after them indented as it is."""
    for m in _TRACEBACK.finditer(text):
        indent = len(m.group(1).expandtabs())
        lines = text[m.end() :].splitlines()[1:]
        frames, tail = [], ""
        for ln in lines:
            depth = len(ln.expandtabs()) - len(ln.expandtabs().lstrip())
            if ln.strip() and depth <= indent:
                tail = ln.strip()
                break
            if ln.strip().startswith("File "):
                frames.append(ln.strip())
        ours = [f for f in frames if "/zeus_run/" in f]
        if ours:
            return f"{(tail or lines[-1].strip())[:200]} (in {ours[-1][:160]})"
    return ""


def server_errors(text: str) -> str:
    """The requests a server's log shows it answered 500 (an answer no fault excuses), if any."""
    paths = _HTTP_500.findall(text)
    return f"{len(paths)} answer(s) 500: {', '.join(sorted(set(paths)))[:200]}" if paths else ""


def audit_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    hits = [ln for ln in lines if "diverge" in ln or ln.startswith(("✗", "Error"))]
    return (hits or lines or ["(no output)"])[0][:300]


# -- output -------------------------------------------------------------------------------------------------


def night_line(log: NightLog, records: Sequence[dict]) -> str:
    night = log.night
    new = records[log.before :]
    trials = " ".join(
        f"{trial_name(r['recurrence'], r['attempt'])}:bs{r['batch_size']}:{r['stop_reason']}" for r in new
    )
    faults = ",".join(night.faults) or "-"
    rcs = " ".join(f"{c.rc}" for c in log.commands)
    verdict = "ok" if not log.violations else f"{len(log.violations)} violation(s)"
    return f"night {night.n:3d}  {night.door:8s} {night.draw_w:3d} W  faults {faults:13s} exit {rcs:8s} {trials or '(no record)'}  {verdict}"


def summary(life: Life, logs: Sequence[NightLog], records: Sequence[dict], n_nights: int) -> Iterator[str]:
    broken = Counter(v.invariant for lg in logs for v in lg.violations)
    doors = Counter(lg.night.door for lg in logs)
    faults = Counter(f for lg in logs for f in lg.night.faults)
    not_injected = [f"night {lg.night.n}: {x}" for lg in logs for x in lg.not_injected]
    yield ""
    yield "invariant   nights broken   violations"
    for inv in INVARIANTS:
        nights = sum(1 for lg in logs if any(v.invariant == inv for v in lg.violations))
        yield f"{inv:10s}  {nights:13d}   {broken[inv]:10d}"
    yield (
        f"full disk: {life.disk.label}; clock jump: {life.clock.label}; energy: the NVML double"
        f" (tests/fake_pynvml); pushes received: {life.gateway.count}"
    )
    if importlib.util.find_spec("mlflow") is None:
        yield "MLflow: not checked (mlflow is not installed; scripts/test_integrations.sh tests its export)"
    else:
        yield "MLflow: not checked (the harness compares the Prometheus exports only)"
    for line in not_injected:
        yield f"not injected: {line}"
    done = f"{len(logs)}/{n_nights} nights"
    trials = f"{len(records)} trials, {len({r['recurrence'] for r in records})} recurrences"
    d = ", ".join(f"{k} {doors[k]}" for k in DOORS if doors[k])
    f = ", ".join(f"{k} {faults[k]}" for k in FAULTS if faults[k]) or "none"
    if broken:
        inv = ", ".join(f"{k} {broken[k]}" for k in INVARIANTS if broken[k])
        yield f"job_life: FAIL: {done}, {trials}; doors {d}; faults {f}; violations: {inv}"
    else:
        yield f"job_life: PASS: {done}, {trials}; doors {d}; faults {f}; every invariant held ({', '.join(INVARIANTS)})"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nights", type=int, default=60, help="Nights to live (default 60; 10 covers every fault kind).")
    ap.add_argument(
        "--short",
        action="store_true",
        help="The short form (scripts/test_heavy.sh): the fewest nights that take every fault kind once and go through every "
        "door (9 for seed 1); instead of --nights.",
    )
    ap.add_argument("--seed", type=int, default=1, help="Seed of the schedule and of the job (default 1).")
    ap.add_argument(
        "--doors", default=",".join(DOORS), help=f"Doors to use, comma-separated (default: {','.join(DOORS)})."
    )
    ap.add_argument("--skip", default="", help=f"Fault kinds to leave out, comma-separated ({','.join(FAULTS)}).")
    ap.add_argument(
        "--keep", action="store_true", help="Keep the work directory (the run directory is copied out of the tmpfs)."
    )
    ap.add_argument("--workdir", type=Path, default=None, help="Work directory (default: a new temporary one).")
    ap.add_argument("-q", "--quiet", action="store_true", help="Print the violations and the summary only.")
    ap.add_argument(
        "--lives",
        type=int,
        default=1,
        help="Lives to live, seeds --seed, --seed + 1, ... (default 1); the last line then gives how often "
        "history's stated 90%% interval held the true saving over all of them.",
    )
    args = ap.parse_args(argv)
    doors = tuple(d for d in args.doors.split(",") if d)
    skip = tuple(s for s in args.skip.split(",") if s)
    unknown = [d for d in doors if d not in DOORS] + [s for s in skip if s not in FAULTS]
    if unknown or args.nights < 1 or not doors or args.lives < 1:
        ap.error(f"unknown door or fault {unknown}, or no night: doors are {DOORS}, faults {FAULTS}")
    if not Path(sys.executable).with_name("zeus-run").exists():
        ap.error(f"no zeus-run beside {sys.executable}: run with the virtual environment's python (pip install -e .)")
    total = Coverage()
    failed = False
    for k in range(args.lives):
        seed = args.seed + k
        if args.lives > 1:
            print(f"job_life: life {k + 1} of {args.lives} (seed {seed})", flush=True)
        rc, cov = one_life(args, seed, doors, skip)
        failed = failed or rc != 0
        total.add(cov)
        if args.lives > 1:
            print(f"life {k + 1}: {cov.line()}", flush=True)
    if args.lives > 1:
        print(f"job_life: {args.lives} lives of {args.nights} nights: {total.line()}", flush=True)
    return 1 if failed else 0


def one_life(
    args: argparse.Namespace, seed: int, doors: tuple[str, ...], skip: tuple[str, ...]
) -> tuple[int, Coverage]:
    """Live one life of ``args.nights`` nights from ``seed``: its exit code (0: every invariant held) and how often
    the stated saving's interval held the true one."""
    cov = Coverage()
    work = args.workdir / f"life-{seed}" if args.workdir and args.lives > 1 else args.workdir
    work = work or Path(tempfile.mkdtemp(prefix="job_life-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.short:
        args = argparse.Namespace(**{**vars(args), "nights": fewest_nights(seed, doors, skip)})
    plan = schedule(args.nights, seed, doors, skip)
    life = Life(work, seed, args.quiet)
    print(f"job_life: {args.nights} nights, seed {seed}, work directory {work}", flush=True)
    interrupted = False
    problem = life.start_server()
    if problem:
        print(f"job_life: {problem}", flush=True)
        life.close(keep=True)
        return 1, cov
    try:
        for night in plan:
            log = life.live(night)
            life.nights.append(log)
            life.check(log)
            records = read_history(life.run_dir / "history.jsonl")[0]
            check_saving(life, night.n, records, cov)
            if not args.quiet or log.violations:
                print(night_line(log, records), flush=True)
                for note in log.injected:
                    if not args.quiet:
                        print(f"  · {note}", flush=True)
            for viol in log.violations:
                print(viol.line(), flush=True)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        records = read_history(life.run_dir / "history.jsonl")[0]
        life.close(keep=args.keep)
    lines = list(summary(life, life.nights, records, args.nights))
    lines.insert(-1, cov.line())
    lines[-1:-1] = [f"  {m}" for m in cov.misses[:10]]
    if args.keep:
        lines.insert(
            -1, f"kept: {work} (run directory copy: {work / 'run-dir'}; each command's output: {work / 'logs'})"
        )
    else:
        shutil.rmtree(work, ignore_errors=True)
    print("\n".join(lines), flush=True)
    failed = interrupted or len(life.nights) < args.nights or any(lg.violations for lg in life.nights)
    return (1 if failed else 0), cov


if __name__ == "__main__":
    sys.exit(main())
