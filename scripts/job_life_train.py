#!/usr/bin/env python3
"""The training script of `scripts/job_life.py`: one job's trials, whichever door runs them.

It trains nothing: each epoch sleeps a batch size's time, and the metric reaches the target after a batch
size's epochs. It drives the NVML double's power as a real script drives its GPU's (`mark`): it marks the
start-up, training, the save after its last epoch (the tail) and its exit (idle) in ``$JOB_LIFE_GPU_MARKS`` at
the night's draws (``$JOB_LIFE_PHASES``); the double and the harness's ledger both read that file.
Like a real script it spends `STARTUP` seconds before it asks for its trial (``import torch``, CUDA,
data) and `SAVE` seconds after its last epoch (saving the model), both inside the span every door
must charge.

It keeps the harness's own ledger, independent of zeus-run's measurements: one JSON line at start
(``start``: the process's start time from the kernel, ``/proc/self/stat``, as seconds since boot)
and one at exit (``exit``: ``CLOCK_BOOTTIME`` at its last statement, its exit code), appended to
``$JOB_LIFE_LEDGER``, plus a ``trial`` line naming the recurrence and try zeus-run gave it. Where it asks
and tells zeus-run from inside its own process (the ``Job`` API, the server's client), it also writes
``asked`` (the ask's start and end), ``telling`` and ``told`` (the tell's start and end): the harness leaves
the ask and the tell out (zeus-run's work, as ``run``'s decision and tell are not charged either) and runs
the span to the exit (what the process does after its tell is the trial's tail: issue 46). Neither
clock moves when the wall clock jumps. The harness integrates the marks over the span.

Modes:
    (default)        ``zeus_run.train.Trial.from_env()``: under ``run --next``, ``exec``, a shell
                     ask/tell (the variables ``zeus-run ask --format env`` exported) and the
                     batch-size server's client (``ZEUS_SERVER``...).
    ``--job SPEC``   the ``zeus_run.Job`` API: ``with Job(SPEC).ask() as trial`` in this process.

Faults it reads from ``$JOB_LIFE_STATE``: a file ``oom`` there makes every trial fail as CUDA does
when the batch size does not fit (after start-up, before the first epoch: the error raised, or, when
the file says ``exit``, printed and ``sys.exit(1)`` as a script that catches it does); while a file ``hold-DOOR``
is there (DOOR: its ``$JOB_LIFE_DOOR``), its first epoch goes on: the harness strikes a fault
mid-trial, then removes it. A script that a busy trigger wrongly starts does not wait.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

#: Seconds before the script asks for its trial (imports, CUDA, data loading).
STARTUP = 1.5
#: Seconds after its last epoch (saving the model).
SAVE = 0.5
#: Seconds per epoch, per batch size.
EPOCH_S = {16: 0.45, 32: 0.3, 64: 0.22, 128: 0.15}
#: Epochs to the target per batch size (0: never; the metric stalls below it).
REACH = {16: 2, 32: 3, 64: 4, 128: 0}
TARGET = 0.9
OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 44.35 GiB total capacity)"
#: Longest the first epoch waits for the harness's ``hold-DOOR`` file to go (unit: s).
HOLD_MAX = 300.0


def _boot_seconds_at_start() -> float:
    """This process's start (seconds since boot), from the kernel (``/proc/self/stat`` field 22)."""
    with open("/proc/self/stat", encoding="ascii") as f:
        stat = f.read()
    ticks = float(stat[stat.rindex(")") + 2 :].split()[19])
    return ticks / os.sysconf("SC_CLK_TCK")


def _now() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class Ledger:
    """The harness's ledger lines of this process (``$JOB_LIFE_LEDGER``; nothing when unset)."""

    def __init__(self) -> None:
        self.path = os.environ.get("JOB_LIFE_LEDGER")
        self.base = {
            "pid": os.getpid(),
            "night": os.environ.get("JOB_LIFE_NIGHT"),
            "door": os.environ.get("JOB_LIFE_DOOR"),
        }
        self.closed = False

    def write(self, event: str, **fields: object) -> None:
        if not self.path:
            return
        line = json.dumps({"event": event, **self.base, **fields}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def exit(self, code: int, **fields: object) -> None:
        if not self.closed:
            self.closed = True
            mark("idle")
            self.write("exit", t=_now(), exit_code=code, **fields)


def mark(phase: str) -> None:
    """The GPU's power from now on (the NVML double's marks, ``$JOB_LIFE_GPU_MARKS``): this phase's draw
    (``$JOB_LIFE_PHASES``), as a real GPU's power follows what its process does. Nothing when unset."""
    path, phases = os.environ.get("JOB_LIFE_GPU_MARKS"), os.environ.get("JOB_LIFE_PHASES")
    if not path or not phases:
        return
    line = json.dumps({"t": _now(), "w": json.loads(phases)[phase], "phase": phase, "pid": os.getpid()}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _fault(name: str) -> bool:
    state = os.environ.get("JOB_LIFE_STATE")
    return bool(state) and os.path.exists(os.path.join(state, name))


def _fault_text(name: str) -> str:
    try:
        with open(os.path.join(os.environ["JOB_LIFE_STATE"], name), encoding="utf-8") as f:
            return f.read().strip()
    except (KeyError, OSError):
        return ""


def _train(trial, ledger: Ledger, ident: dict) -> dict:
    """The epochs of one trial; returns what happened (for the ledger's exit line)."""
    ledger.write("trial", t=_now(), batch_size=trial.batch_size, **ident)
    mark("train")
    if _fault("oom"):
        if _fault_text("oom") == "exit":  # a script that catches the error, prints it and exits 1
            print(f"RuntimeError: {OOM}", file=sys.stderr)
            sys.exit(1)
        raise RuntimeError(OOM)
    need = REACH.get(trial.batch_size, 0)
    epochs = 0
    for epoch in trial.epochs():
        time.sleep(EPOCH_S.get(trial.batch_size, 0.3))
        held = time.monotonic()
        while epoch == 1 and _fault(f"hold-{ledger.base['door']}") and time.monotonic() - held < HOLD_MAX:
            time.sleep(0.05)
        metric = 0.95 if need and epoch >= need else 0.5 + 0.01 * epoch
        print(f"epoch {epoch} val_acc={metric}")  # not flushed: a pipe holds it, as on users' machines
        epochs = epoch
        if not trial.report(metric):
            break
    mark("tail")
    time.sleep(SAVE)
    return {"epochs": epochs, "reached": bool(trial.reached)}


def _ident_from_env() -> dict:
    return {
        "recurrence": int(os.environ.get("ZEUS_RECURRENCE") or 0) or None,
        "attempt": int(os.environ.get("ZEUS_TRY") or 0) or None,
        "trial_dir": os.path.basename(os.environ.get("ZEUS_LOG_DIR") or "") or None,
    }


def main() -> int:
    ledger = Ledger()
    ledger.write("start", t=_boot_seconds_at_start(), first_line=_now())
    mark("startup")

    def on_term(signum: int, _frame: object) -> None:
        ledger.exit(128 + signum, signal=signum)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", default=None, help="Train through the zeus_run.Job API on this spec.")
    args = ap.parse_args()
    time.sleep(STARTUP)
    try:
        if args.job:
            import zeus_run

            job_api = zeus_run.Job  # its import is the script's, as any import (torch's) is
            t0 = _now()
            asked = job_api(args.job).ask()
            ledger.write("asked", t0=t0, t=_now())  # zeus-run's work in this process, as run's decision is its own
            a = asked.asked
            ident = {"recurrence": a.recurrence, "attempt": a.attempt, "trial_dir": a.trial_dir.name}
            with asked as trial:
                done = _train(trial, ledger, ident)
                ledger.write("telling", t=_now())  # the block's end tells: zeus-run's work, as run's tell is
            ledger.write("told", t=_now())  # what the process does after this is the trial's tail
        else:
            from zeus_run.train import Trial

            t0 = _now()
            trial = Trial.from_env(batch_size=64, max_epochs=6, target_metric=TARGET)
            if trial.remote is not None:
                ledger.write("asked", t0=t0, t=_now())  # the server's client asked in this process
                d = trial.remote.decision
                ident = {"recurrence": d.get("recurrence"), "attempt": d.get("attempt"), "trial_dir": None}
                ident["trial_dir"] = os.path.basename(str(d.get("trial_dir") or "")) or None
            else:
                ident = _ident_from_env()
            done = _train(trial, ledger, ident)
            telling = _now()
            trial.close()
            if trial.remote is not None:
                ledger.write("telling", t=telling)
                ledger.write("told", t=_now())
    except BaseException as exc:
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 1
        ledger.exit(code, error=f"{type(exc).__name__}: {exc}"[:300])
        raise
    ledger.exit(0, **done)
    return 0


if __name__ == "__main__":
    sys.exit(main())
