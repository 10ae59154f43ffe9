"""A training script whose output may be held in a buffer, for the tests of issue 26 (output through a pipe).

    buffered_train.py [--stdio python|c] [--epochs N] [--quiet S] [--ack-wait S] [--exit-code N] [--fill BYTES]

Prints ``val_acc=0.1`` ... once per epoch, never flushing:

* ``--stdio python`` (default): Python's own rule: line by line on a terminal or with
  ``PYTHONUNBUFFERED`` set, else in blocks;
* ``--stdio c``: as C's stdio: in 8 KiB blocks unless stdout is a terminal, whatever
  ``PYTHONUNBUFFERED`` says. On a terminal it first prints a coloured ``TERM=...`` line.

After each epoch it waits at most ``--ack-wait`` seconds until zeus-run has counted that
epoch (``epochs.jsonl`` in ``$ZEUS_LOG_DIR`` has that many lines: the agent writes one
per epoch it read), and at its end writes ``acked.txt``: how many epochs zeus-run counted
while it ran. That tells line-timed output from output held until the exit without timing
anything. ``--quiet`` sleeps that long before the first epoch; ``--fill`` prints that many
bytes of filler lines before exiting (output still unread at the exit is not lost).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--stdio", choices=("python", "c"), default="python")
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--quiet", type=float, default=0.0)
ap.add_argument("--ack-wait", type=float, default=60.0)
ap.add_argument("--exit-code", type=int, default=0)
ap.add_argument("--fill", type=int, default=0)
args = ap.parse_args()

if sys.stdout.isatty():
    print(f"\x1b[32mTERM={os.environ.get('TERM', '')}\x1b[0m")
elif args.stdio == "c":
    sys.stdout = io.TextIOWrapper(open(1, "wb", buffering=8192, closefd=False), line_buffering=False)  # noqa: SIM115

epochs_file = os.path.join(os.environ.get("ZEUS_LOG_DIR", "."), "epochs.jsonl")


def counted() -> int:
    try:
        with open(epochs_file) as f:
            return len(f.read().splitlines())
    except OSError:
        return 0


time.sleep(args.quiet)
acked = 0
for epoch in range(1, args.epochs + 1):
    print(f"epoch {epoch} val_acc={epoch / 10:.1f}")
    deadline = time.monotonic() + args.ack_wait
    while counted() < epoch and time.monotonic() < deadline:
        time.sleep(0.02)
    acked = counted()
for i in range(args.fill // 100):
    print(f"{i:08d}" + "x" * 91)
print("done")
with open(os.path.join(os.environ.get("ZEUS_LOG_DIR", "."), "acked.txt"), "w") as f:
    f.write(str(acked))
sys.stdout.flush()
sys.exit(args.exit_code)
