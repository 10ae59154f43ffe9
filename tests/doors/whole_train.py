#!/usr/bin/env python3
"""A training process with a start-up and work after its tell, for `test_whole_process.py` (issue 46).

It spends ``start`` seconds from its own start before it asks for (or reads) its trial, trains ``epoch`` seconds an
epoch until the target (epoch ``--reach``), tells (the end of the `Job` block, `Trial.close`), then works
``after`` seconds more (saving, evaluating, tearing down) before it asks for its next trial (``--trials``) or
exits. ``$WHOLE_TIMES`` is ``start,epoch,after`` in seconds.

Its ledger (``$WHOLE_LEDGER``, one JSON line written by the last exit hook) is the test's own truth, taken
without zeus-run: ``start``, the process's start from ``/proc/self/stat`` and ``/proc/uptime``; per trial,
``ask_begin`` and ``ask_end``, wall clocks around the calls that ask zeus-run for it in this process (none for
a trial the environment names), ``tell_begin`` and ``told``, wall clocks before and after its tell (the end of
the `Job` block, `Trial.close`).

``--door``: ``trial`` (`zeus_run.train.Trial.from_env`: run, exec, a shell's ask/tell, a server when
``ZEUS_SERVER`` is set), ``job`` (`zeus_run.Job` on ``--spec``), ``driver`` (what the framework callbacks do,
`zeus_run.integrations._driver.Driver`).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

LEDGER: dict = {"start": None, "trials": []}


def own_start() -> float:
    """This process's start (Unix time), read here from /proc, not through zeus-run."""
    with open("/proc/self/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    with open("/proc/uptime", encoding="ascii") as f:
        uptime = float(f.read().split()[0])
    return time.time() - (uptime - float(fields[19]) / os.sysconf("SC_CLK_TCK"))


def write_ledger() -> None:
    path = os.environ.get("WHOLE_LEDGER")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({**LEDGER, "last_hook": time.time()}) + "\n")


def train(trial, epoch_s: float, reach: int) -> None:
    for epoch in trial.epochs():
        time.sleep(epoch_s)
        if not trial.report(0.95 if epoch >= reach else 0.5):
            break


def main() -> None:
    LEDGER["start"] = own_start()
    atexit.register(write_ledger)  # first registered: runs last
    ap = argparse.ArgumentParser()
    ap.add_argument("--door", choices=("trial", "job", "driver"), default="trial")
    ap.add_argument("--spec", default=None)
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--reach", type=int, default=3)
    args = ap.parse_args()
    start, epoch_s, after = (float(x) for x in (os.environ.get("WHOLE_TIMES") or "1.5,0.8,2.0").split(","))
    # The same imports whatever the door, so that the start-up is the same work.
    import zeus_run
    import zeus_run.asktell
    import zeus_run.integrations._driver
    import zeus_run.train

    time.sleep(max(LEDGER["start"] + start - time.time(), 0.0))  # start-up: imports, data, CUDA
    job = None
    for _ in range(args.trials):
        entry: dict = {"ask_begin": time.time()}
        LEDGER["trials"].append(entry)
        if args.door == "job":
            if job is None:
                job = zeus_run.Job(args.spec)
            asked = job.ask()
            entry["ask_end"] = time.time()
            with asked as trial:
                train(trial, epoch_s, args.reach)
                entry["tell_begin"] = time.time()  # the block's end tells
        elif args.door == "driver":
            driver = zeus_run.integrations._driver.Driver(default_metric="accuracy")
            entry["ask_end"] = time.time()
            for epoch in range(1, driver.trial.max_epochs + 1):
                time.sleep(epoch_s)
                if driver.evaluated({"accuracy": 0.95 if epoch >= args.reach else 0.5}):
                    break
            entry["tell_begin"] = time.time()
            driver.close()  # on_train_end
        else:
            trial = zeus_run.train.Trial.from_env(batch_size=8, max_epochs=6, target_metric=0.9)
            entry["ask_end"] = time.time()
            train(trial, epoch_s, args.reach)
            entry["tell_begin"] = time.time()
            trial.close()
        entry["told"] = time.time()
        time.sleep(after)  # saving, evaluating, tearing down: after the tell, still this trial's


if __name__ == "__main__":
    main()
