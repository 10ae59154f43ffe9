"""A training script whose night can go wrong: it runs out of GPU memory while a file says so.

Usage: night_train.py --batch-size B --oom-file PATH [--needs "B:E,..."]

While PATH exists (a test creates it for a bad night) every run prints a CUDA out-of-memory error
and exits 1 after its first line, whatever the batch size; otherwise batch size B reaches the
target after E epochs (default 2), reporting through ``zeus_run.train``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from zeus_run.train import Trial

ap = argparse.ArgumentParser()
ap.add_argument("--batch-size", type=int, required=True)
ap.add_argument("--oom-file", required=True)
ap.add_argument("--needs", default="")
args = ap.parse_args()
needs = {int(b): int(e) for b, e in (p.split(":") for p in args.needs.split(",") if p)}

trial = Trial.from_env(batch_size=args.batch_size, max_epochs=5, target_metric=0.9)
print(f"loading data for batch size {args.batch_size}", flush=True)
if Path(args.oom_file).exists():
    print("allocating activations", flush=True)
    raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity)")
for epoch in trial.epochs():
    print(f"epoch {epoch} done", flush=True)
    trial.report(1.0 if epoch >= needs.get(args.batch_size, 2) else 0.5)
trial.close()
