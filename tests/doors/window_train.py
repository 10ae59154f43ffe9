#!/usr/bin/env python3
"""A trial with a start-up and a save, for the measurement window through every door (tests/doors/test_window.py).

It spends its first ``--start`` seconds (from its process's start: its imports, zeus-run's included, then a
wait) before it reads its trial (as ``import torch`` and CUDA's start do), so that its start-up is the same
work whatever the door; it trains
``--epoch`` seconds an epoch until the target (metric 0.95 from epoch ``--reach``), then saves for ``--save``
seconds and exits. The GPU is the NVML double (tests/fake_pynvml) drawing a constant power, so what the trial
drew is that power x its span: the script appends its span to ``$WINDOW_LEDGER`` as the very last thing it does
(its own ledger: ``start`` from ``/proc``, ``end`` the interpreter's exit, or the end of the `Job` block, which
tells in the process), with ``asking_s``, the time it spent in calls that ask zeus-run for the trial in the
process (``zeus_run.Job`` and its ``ask``; ``Trial.from_env`` with a server): a bound on the ask a record
leaves out (``window.ask_s``).

``$WINDOW_TIMES`` (``start,epoch,save`` in seconds) changes the defaults of the three.

``$WINDOW_MARKS`` and ``$WINDOW_PHASES`` (a JSON ``{phase: watts}``): the script drives the NVML double's power
as a real script drives its GPU (`tests.fake_nvml.GpuTruth`'s marks): ``startup`` from its first line, ``train``
halfway through its start-up ``load`` (data, CUDA: the GPU wakes), once it has its trial ``train``, ``tail``
while it saves, ``idle`` at its exit (a phase the JSON lacks is not marked).

``--door``: how it reads its trial: ``trial`` (`zeus_run.train.Trial.from_env`), ``job`` (the Python
`zeus_run.Job` API on ``--spec``, saving inside the block), ``driver`` (what the Hugging Face and Lightning
callbacks do: `zeus_run.integrations._driver.Driver`, closed at the end of training, then the save).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))


#: The span the script reports (`_ledger`): ``end`` (None: at exit) and ``asking_s``; with ``--trials``, each
#: trial's ``end`` and ``asking_s`` (``trials``).
SPAN: dict[str, Any] = {"end": None, "asking_s": 0.0, "telling_s": 0.0, "trials": []}


def proc_start() -> float:
    """This process's start (Unix time, unit: s), read from ``/proc`` here: the ledger's truth is never zeus-run's
    own code (``zeus_run.contract.process_start_time`` is what the doors measure with)."""
    with open("/proc/self/stat", encoding="ascii") as f:
        stat = f.read()
    ticks = float(stat[stat.rindex(")") + 2 :].split()[19])  # field 22: starttime, clock ticks since boot
    since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.time() - (since_boot - ticks / os.sysconf("SC_CLK_TCK"))


def _ledger() -> None:
    """Registered first, so it runs last at exit: the script's span, as its own ledger."""
    path = os.environ.get("WINDOW_LEDGER")
    if path:
        span = {"start": proc_start(), "end": SPAN["end"] or time.time(), "asking_s": SPAN["asking_s"]}
        span["telling_s"] = SPAN["telling_s"]  # the tells this process made itself (zeus-run's work)
        span["trials"] = SPAN["trials"]
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(span) + "\n")


def mark(phase: str) -> None:
    """The double's power from now on: this phase's draw (nothing without ``$WINDOW_MARKS``)."""
    path, phases = os.environ.get("WINDOW_MARKS"), os.environ.get("WINDOW_PHASES")
    if path and phases:
        watts = json.loads(phases).get(phase)
        if watts is None:
            return
        line = {"t": time.clock_gettime(time.CLOCK_BOOTTIME), "w": watts, "phase": phase}
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


def _asked(t: float) -> None:
    SPAN["asking_s"] = (SPAN["asking_s"] or 0.0) + time.monotonic() - t


def main() -> None:
    atexit.register(_ledger)
    mark("startup")
    atexit.register(mark, "idle")  # runs before the ledger's line (registered later)
    ap = argparse.ArgumentParser()
    ap.add_argument("--door", choices=("trial", "job", "driver"), default="trial")
    ap.add_argument("--spec", default=None)
    ap.add_argument("--trials", type=int, default=1, help="job door: trials in this process, one after another")
    start, epoch, save = (float(x) for x in (os.environ.get("WINDOW_TIMES") or "1.5,0.8,0.5").split(","))
    ap.add_argument("--start", type=float, default=start)
    ap.add_argument("--epoch", type=float, default=epoch)
    ap.add_argument("--reach", type=int, default=3)
    ap.add_argument("--save", type=float, default=save)
    args = ap.parse_args()
    # The same imports whatever the door (what each door's helper needs), so that the start-up is the same work.
    import zeus_run
    import zeus_run.asktell
    import zeus_run.energy
    import zeus_run.integrations._driver
    import zeus_run.train

    began = proc_start()
    time.sleep(max(began + args.start / 2 - time.time(), 0.0))  # start-up: imports (the GPU idles), ...
    mark("load")
    time.sleep(max(began + args.start - time.time(), 0.0))  # ... then data and CUDA (the GPU wakes)
    if args.door == "job":
        t = time.monotonic()
        job = zeus_run.Job(args.spec)
        for k in range(args.trials):
            if k:
                time.sleep(args.start)  # the next trial's data, loaded between the two
                t = time.monotonic()
            asked = job.ask()
            _asked(t)
            spent = time.monotonic() - t
            with asked as trial:
                mark("train")
                for epoch in trial.epochs():
                    time.sleep(args.epoch)
                    if not trial.report(0.95 if epoch >= args.reach else 0.5):
                        break
                mark("tail")
                time.sleep(args.save)  # the model saved inside the block
                SPAN["end"] = time.time()  # the block tells in this process: its end is the trial's
            SPAN["telling_s"] += time.time() - SPAN["end"]  # the block's end told
            SPAN["trials"].append({"end": SPAN["end"], "asking_s": spent})
        return
    if args.door == "driver":
        from zeus_run.integrations._driver import Driver

        driver = Driver(default_metric="accuracy")
        mark("train")
        for epoch in range(1, driver.trial.max_epochs + 1):
            time.sleep(args.epoch)
            if driver.evaluated({"accuracy": 0.95 if epoch >= args.reach else 0.5}):
                break
        driver.close()  # on_train_end
        mark("tail")
        time.sleep(args.save)  # trainer.save_model() after trainer.train()
        return
    from zeus_run.train import Trial

    t = time.monotonic()
    trial = Trial.from_env(batch_size=8, max_epochs=6, target_metric=0.9)
    mark("train")
    if trial.remote is not None:  # it asked the server
        _asked(t)
    for epoch in trial.epochs():
        time.sleep(args.epoch)
        if not trial.report(0.95 if epoch >= args.reach else 0.5):
            break
    mark("tail")
    time.sleep(args.save)  # the model saved after the target
    telling = time.time()
    trial.close()
    if trial.remote is not None:
        SPAN["telling_s"] += time.time() - telling
    if trial.remote is not None:
        SPAN["end"] = time.time()  # told at its close, to the server


if __name__ == "__main__":
    main()
