#!/usr/bin/env python3
"""A training script that saves a model after its loop, for the stop-protocol tests.

Options:
  --mode events|print   report through zeus_run.train, or print "val_acc=X" lines (regex mode)
  --needs E             the target is reached after E epochs (0: never)
  --epoch-time S        seconds each epoch takes
  --save-time S         after the loop, take S seconds to write $ZEUS_LOG_DIR/model.txt
  --sigterm save|ignore on SIGTERM: save the model (quickly) and exit 0, or ignore it
  --extra-epochs N      print mode: keep training N epochs after the target, then leave the loop
  --max-epochs N        print mode: leave the loop after N epochs
  --forever             never leave the loop by itself (ignores the stop file)
"""

import argparse
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from zeus_run.train import Trial

ap = argparse.ArgumentParser()
ap.add_argument("--mode", default="events")
ap.add_argument("--needs", type=int, default=2)
ap.add_argument("--epoch-time", type=float, default=0.05)
ap.add_argument("--save-time", type=float, default=0.0)
ap.add_argument("--sigterm", default="")
ap.add_argument("--extra-epochs", type=int, default=0)
ap.add_argument("--max-epochs", type=int, default=10)
ap.add_argument("--forever", action="store_true")
args = ap.parse_args()

log_dir = os.environ.get("ZEUS_LOG_DIR", ".")


def save(how: str) -> None:
    tmp = os.path.join(log_dir, "model.tmp")
    with open(tmp, "w") as f:
        f.write(how)
    os.replace(tmp, os.path.join(log_dir, "model.txt"))


if args.sigterm == "save":

    def on_term(signum, frame):
        print("SIGTERM: saving model", flush=True)
        save("sigterm")
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
elif args.sigterm == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

trial = Trial.from_env(max_epochs=args.max_epochs, target_metric=0.9)
epoch = 0
reached_at = None
while True:
    epoch += 1
    time.sleep(args.epoch_time)
    metric = 1.0 if args.needs and epoch >= args.needs else 0.5
    if args.mode == "print":
        print(f"epoch {epoch} val_acc={metric:.3f}", flush=True)
        if metric >= 0.9 and reached_at is None:
            reached_at = epoch
        done = (reached_at is not None and epoch >= reached_at + args.extra_epochs) or epoch >= args.max_epochs
    else:
        done = not trial.report(metric)
    if done and not args.forever:
        break
print("loop ended, saving model...", flush=True)
time.sleep(args.save_time)
save("loop")
print("model saved", flush=True)
