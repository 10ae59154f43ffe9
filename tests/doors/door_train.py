#!/usr/bin/env python3
"""One training script for every door (tests/doors): the `zeus_run.train.Trial` helper, CPU work per epoch.

Batch size B reaches the target (metric 0.95) after ``REACH[B]`` epochs (0: never; metric 0.5).
Each epoch burns ``WORK[B]`` seconds of CPU time (so that the CPU-time estimate of its energy is the
same work whatever the door and the machine's load) and prints one line without flushing.

Options: ``--fail crash|oom|import|no-metric|oom-exit|wrong-metric`` for the failure outcomes: ``oom-exit``
prints an out-of-memory error and calls ``sys.exit(1)``; ``wrong-metric`` reports through the framework callbacks'
driver (`zeus_run.integrations._driver.Driver`) under a metric name the evaluation does not log, after one epoch.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

#: Epochs to the target per batch size (0: never).
REACH = {8: 2, 16: 0}
#: CPU seconds per epoch per batch size.
WORK = {8: 0.8, 16: 1.2}


def burn(cpu_seconds: float) -> None:
    """Spin until this process has used ``cpu_seconds`` more CPU time."""
    end = time.process_time() + cpu_seconds
    x = 0
    while time.process_time() < end:
        x += 1


def train(trial) -> None:  # trial: a zeus_run.train.Trial
    """The training loop every door runs."""
    need = REACH.get(trial.batch_size, 0)
    for epoch in trial.epochs():
        burn(WORK.get(trial.batch_size, 1.0))
        metric = 0.95 if need and epoch >= need else 0.5
        print(f"epoch {epoch} val_acc={metric}")  # not flushed: a pipe holds it
        if not trial.report(metric):
            break


#: What ``--fail crash`` and ``--fail oom`` raise.
FAILURES = {"crash": "boom", "oom": "CUDA out of memory. Tried to allocate 2.00 GiB"}


def begin(choices: tuple[str, ...]):
    """Parse ``--fail``, fail as it says before training (an import, a crash, out of memory), and return the
    option and the trial (`zeus_run.train.Trial`); the doors' scripts share it."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--fail", choices=choices, default=None)
    fail = ap.parse_args().fail
    if fail == "import":
        import zeus_run_not_installed  # noqa: F401
    import zeus_run.asktell  # noqa: F401  (every door's script starts up alike: the Job API's needs it)
    from zeus_run.train import Trial

    trial = Trial.from_env(batch_size=8, max_epochs=6, target_metric=0.9)
    if fail in FAILURES:
        raise RuntimeError(FAILURES[fail])
    return fail, trial


#: The line ``--fail oom-exit`` prints before it exits 1.
OOM_LINE = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"


def main() -> None:
    fail, trial = begin(("crash", "oom", "import", "no-metric", "oom-exit", "wrong-metric"))
    if fail == "no-metric":
        burn(0.5)
        trial.close()
        return
    if fail == "oom-exit":
        burn(0.3)
        print(OOM_LINE)  # not flushed: a pipe holds it until the exit
        sys.exit(1)
    if fail == "wrong-metric":
        from zeus_run.integrations._driver import Driver

        driver = Driver(trial, metric="eval_acc")  # the evaluation logs "accuracy"
        burn(WORK.get(trial.batch_size, 1.0))
        driver.evaluated({"accuracy": 0.5, "loss": 0.7})  # raises MetricNotFound
    train(trial)
    trial.close()


if __name__ == "__main__":
    main()
