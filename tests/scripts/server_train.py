#!/usr/bin/env python3
"""A training client of ``zeus-run serve`` for the server tests: the unchanged `zeus_run.train.Trial` helper.

Runs trials of ``$ZEUS_SERVER_JOB`` one after another until the server says the
job is complete. Each trial asks (``Trial.from_env``), reports one metric per
epoch and stops when the server says so. Batch size B reaches the target after
``NEEDS[B]`` epochs (0: never).

Options: --trials N (at most N trials, default: until complete);
--epoch-time S (sleep per epoch); --ready-file F (touched after the first ask);
--fail-first (the first trial fails after its first epoch: told with ``fail``).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from zeus_run.remote import ServerError
from zeus_run.train import Trial

NEEDS = {8: 3, 16: 3, 32: 3, 64: 4, 128: 4, 256: 5, 512: 6, 1024: 8, 2048: 0, 1: 0, 2: 2, 4: 3}

ap = argparse.ArgumentParser()
ap.add_argument("--trials", type=int, default=0)
ap.add_argument("--epoch-time", type=float, default=0.0)
ap.add_argument("--ready-file", default="")
ap.add_argument("--fail-first", action="store_true")
args = ap.parse_args()

done = 0
while not args.trials or done < args.trials:
    try:
        trial = Trial.from_env(batch_size=1, max_epochs=10, target_metric=0.9)
    except ServerError as exc:
        if exc.code == "job_complete":
            print(f"job complete after {done} trial(s) here", flush=True)
            break
        raise
    if args.ready_file:
        open(args.ready_file, "a").close()
    need = NEEDS.get(trial.batch_size, 0)
    for epoch in trial.epochs():
        if args.epoch_time:
            time.sleep(args.epoch_time)
        metric = 0.95 if need and epoch >= need else 0.5
        if not trial.report(metric):
            break
        if args.fail_first and not done:
            break
    if args.fail_first and not done and trial.remote is not None:
        trial.remote.fail("RuntimeError: boom", exit_code=1)
    trial.close()
    print(
        f"trial bs={trial.batch_size} epochs={trial.epoch} stop={trial.remote and trial.remote.stop_reason}", flush=True
    )
    done += 1
