#!/usr/bin/env python3
"""The doors' training loop (`door_train.train`) through the Python `zeus_run.Job` API, one process, ``--trials`` trials.

``--fail crash|oom`` raises in each ``with`` block (`door_train.FAILURES`); the block tells the crash and the
error goes on, caught here so the next trial is asked (the script exits 0). ``--fail oom-exit`` prints an
out-of-memory error in the block and calls ``sys.exit(1)``.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from tests.doors.door_train import FAILURES, OOM_LINE, train


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--fail", choices=(*FAILURES, "oom-exit"), default=None)
    args = ap.parse_args()
    import zeus_run.asktell  # the start-up every door's script does (door_train.begin)

    job = zeus_run.Job(args.spec)
    for _ in range(args.trials):
        try:
            with job.ask() as trial:
                if args.fail == "oom-exit":  # the whole script ends from inside the block
                    print(OOM_LINE)
                    sys.exit(1)
                if args.fail:
                    raise RuntimeError(FAILURES[args.fail])
                train(trial)
        except RuntimeError as exc:
            assert str(exc) == FAILURES.get(args.fail or ""), exc  # the block's own error goes on after it is told


if __name__ == "__main__":
    main()
