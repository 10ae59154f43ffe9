#!/usr/bin/env python3
"""A controllable fake training script for zeus-run's integration tests.

Options (command line):
  --batch-size N       the batch size (also read from ZEUS_BATCH_SIZE)
  --needs "B:E,..."    batch size B reaches the target after E epochs (0: never)
  --epoch-time S       seconds each epoch takes (sleep)
  --crash-at E         exit with code 3 at epoch E
  --mode events|print  report through zeus_run.train, or print "val_acc=X" lines
  --pid-file PATH      write "<own pid> <grandchild pid>" (a sleeping child process)
  --ignore-stop        keep training after report() says stop (the launcher must kill it)
  --spam BYTES         print this many bytes of filler output per epoch
  --hold PATH          after the first epoch, wait until PATH exists or zeus-run asks the
                       script to stop (so a test can keep the trial in flight until it acts)
"""

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from zeus_run.train import Trial

ap = argparse.ArgumentParser()
ap.add_argument("--batch-size", type=int, default=None)
ap.add_argument("--needs", default="")
ap.add_argument("--epoch-time", type=float, default=0.0)
ap.add_argument("--crash-at", type=int, default=0)
ap.add_argument("--crash-bs", type=int, default=0, help="only crash at this batch size")
ap.add_argument("--mode", default="events")
ap.add_argument("--pid-file", default="")
ap.add_argument("--ignore-stop", action="store_true")
ap.add_argument("--spam", type=int, default=0)
ap.add_argument("--hold", default="")
ap.add_argument("--hang-bs", type=int, default=0, help="at this batch size, hang after epoch 1 (a timeout ends it)")
args = ap.parse_args()

trial = Trial.from_env(batch_size=1, max_epochs=10, target_metric=0.9)
bs = args.batch_size or trial.batch_size
needs = {int(b): int(e) for b, e in (p.split(":") for p in args.needs.split(",") if p)}
need = needs.get(bs, 0)

if args.pid_file:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    tmp = f"{args.pid_file}.{os.getpid()}"
    with open(tmp, "w") as f:  # written whole, then renamed: a reader never sees it half-written
        f.write(f"{os.getpid()} {child.pid}\n")
    os.replace(tmp, args.pid_file)

epoch = 0
while True:
    epoch += 1
    if args.epoch_time:
        time.sleep(args.epoch_time)
    if args.spam:
        line = "x" * 1000
        for _ in range(args.spam // 1000):
            print(line)
    if args.crash_at and epoch >= args.crash_at and args.crash_bs in (0, bs):
        print(f"boom at epoch {epoch}", file=sys.stderr, flush=True)
        sys.exit(3)
    if args.hold and epoch == 1:
        while not os.path.exists(args.hold) and not trial.should_stop():
            time.sleep(0.05)
    metric = 1.0 if need and epoch >= need else 0.5
    if args.mode == "print":
        print(f"epoch {epoch} val_acc={metric:.3f}", flush=True)
        keep = epoch < trial.max_epochs and metric < 0.9
    else:
        print(f"epoch {epoch} done", flush=True)
        keep = trial.report(metric)
    if args.hang_bs and bs == args.hang_bs:
        while True:
            time.sleep(1)
    if not keep and not args.ignore_stop:
        break
