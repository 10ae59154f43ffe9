"""A training script that runs out of GPU memory above a batch size, like PyTorch does.

Usage: oom_train.py --batch-size B --oom-above N [--needs EPOCHS]
Batch sizes above N raise ``RuntimeError: CUDA out of memory`` after printing a
few lines; the others reach the target after ``--needs`` epochs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from zeus_run.train import Trial

ap = argparse.ArgumentParser()
ap.add_argument("--batch-size", type=int, required=True)
ap.add_argument("--oom-above", type=int, required=True)
ap.add_argument("--needs", type=int, default=2)
args = ap.parse_args()

trial = Trial.from_env(batch_size=args.batch_size, max_epochs=5, target_metric=0.9)
print(f"loading data for batch size {args.batch_size}", flush=True)
if args.batch_size > args.oom_above:
    print("allocating activations", flush=True)
    raise RuntimeError(
        "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; 14.10 GiB already allocated)"
    )
for epoch in trial.epochs():
    print(f"epoch {epoch} done", flush=True)
    trial.report(1.0 if epoch >= args.needs else 0.5)
trial.close()
