#!/usr/bin/env python3
"""Per-trial overhead of the launcher: a trivial trial run through `run_job` vs the same command run bare.

The script prints its metric and exits at once, so what remains is the
launcher's own work per trial: planning, the crash marker, watching,
stopping, sweeping the trial's processes, and the durable history append.

Example:

    python scripts/bench_trial_overhead.py --trials 40
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zeus_run.engine.runner import run_job
from zeus_run.spec import parse_spec

SPEC = """
name: overhead
command: ["{python}", "-S", "-c", "print('val=1.0', flush=True)"]
batch_sizes: [1]
default_batch_size: 1
target_metric: 0.9
recurrences: %d
metric: {regex: 'val=([0-9.]+)'}
energy: {source: estimate, watts: 100}
run_dir: runs
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3, help="measure this many times; the median is reported")
    args = ap.parse_args(argv)
    cmd = [sys.executable, "-S", "-c", "print('val=1.0', flush=True)"]
    bare, full = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.trials):
            subprocess.run(cmd, capture_output=True, check=True)
        bare.append((time.perf_counter() - start) / args.trials)
        with tempfile.TemporaryDirectory() as tmp:
            spec = parse_spec(SPEC % args.trials, source=Path(tmp) / "job.yaml")
            start = time.perf_counter()
            run_job(spec)
            full.append((time.perf_counter() - start) / args.trials)
    b, f = statistics.median(bare), statistics.median(full)
    print(f"bare command:         {b * 1000:7.1f} ms per run")
    print(f"through run_job:      {f * 1000:7.1f} ms per trial")
    print(f"launcher overhead:    {(f - b) * 1000:7.1f} ms per trial (median of {args.repeats} x {args.trials})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
