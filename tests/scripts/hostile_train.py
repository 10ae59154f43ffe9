#!/usr/bin/env python3
"""A training script that misbehaves on purpose, for zeus-run's hardening tests.

It writes its epoch events (and anything else) straight to ``$ZEUS_EVENT_LOG``
as raw lines, so it can send what `zeus_run.train` never would.

Options:
  --needs "B:E,..."   batch size B reaches the target (metric 1.0) at epoch E (0: never)
  --nan-bs B          at batch size B every epoch's metric is NaN (a diverging model)
  --metric-literal S  at --nan-bs, write this JSON literal as the metric instead of NaN (e.g. 1e999)
  --junk              before each epoch event, write a set of invalid events
  --print-escapes     print terminal escape sequences (clear screen, title, colors) each epoch
  --mode events|print report through the event log, or print "val_acc=X" lines
  --crash-with-escapes  print terminal escapes to stderr and exit 3 at the first epoch
  --plant-stop-link P   replace $ZEUS_STOP_FILE with a symbolic link to P before the first epoch
"""

import argparse
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--needs", default="")
ap.add_argument("--nan-bs", type=int, default=0)
ap.add_argument("--metric-literal", default="NaN")
ap.add_argument("--junk", action="store_true")
ap.add_argument("--print-escapes", action="store_true")
ap.add_argument("--mode", default="events")
ap.add_argument("--crash-with-escapes", action="store_true")
ap.add_argument("--plant-stop-link", default="")
args = ap.parse_args()

bs = int(os.environ["ZEUS_BATCH_SIZE"])
max_epochs = int(os.environ["ZEUS_MAX_EPOCHS"])
stop_file = os.environ["ZEUS_STOP_FILE"]
needs = {int(b): int(e) for b, e in (p.split(":") for p in args.needs.split(",") if p)}
need = needs.get(bs, 0)

JUNK = [
    '{"event": "epoch", "metric": 0.5, "epoch": 1e999}',
    '{"event": "step", "n": 1e999}',
    '{"event": "step", "n": -5}',
    '{"event": "info", "iters_per_epoch": "lots"}',
    '{"event": "epoch", "metric": [1, 2]}',
    '{"event": "epoch", "metric": true}',
    "[1, 2]",
    "null",
    '"epoch"',
    "{not json",
    "[" * 60000,
    '{"event": "epoch", "metric": 0.5, "epoch": ' + "9" * 400 + "}",
]

if args.plant_stop_link:
    os.symlink(args.plant_stop_link, stop_file)
if args.crash_with_escapes:
    sys.stderr.write("\x1b[2J\x1b[H\x1b]0;pwned\x07RuntimeError: \x1b[31mboom\x1b[0m\n")
    sys.exit(3)

log = open(os.environ["ZEUS_EVENT_LOG"], "a")  # noqa: SIM115
for epoch in range(1, max_epochs + 1):
    if args.junk:
        for line in JUNK:
            log.write(line + "\n")
    if bs == args.nan_bs:
        metric = args.metric_literal
    else:
        metric = "1.0" if need and epoch >= need else "0.5"
    if args.print_escapes:
        sys.stdout.write(f"\x1b[2J\x1b[H\x1b]0;pwned\x07\x1b[31mred\x1b[0m epoch {epoch}\r\n")
    if args.mode == "print":
        print(f"epoch {epoch} val_acc={metric}", flush=True)
    else:
        print(f"epoch {epoch}", flush=True)
        log.write(f'{{"event": "epoch", "epoch": {epoch}, "metric": {metric}}}\n')
        log.flush()
    if args.plant_stop_link and metric == "1.0":
        time.sleep(60)  # the launcher must stop it: it touches the stop file, then signals
    if metric == "1.0" or (os.path.lexists(stop_file) and not args.plant_stop_link):
        break
log.close()
