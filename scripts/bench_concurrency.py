#!/usr/bin/env python3
"""Wall time of the demo job with one recurrence in flight against several, measured side by side.

Runs ``configs/demo.yaml`` (20 recurrences, CPU slots) through the ``zeus-run``
command, alternating ``concurrency: 1`` and ``concurrency: N`` so that both see
the same machine load, each in a fresh run directory, and prints each run's wall
time, the medians and their ratio. The goal for N = 2 is at most 0.65x.

Example:

    python scripts/bench_concurrency.py --repeats 3 --concurrency 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def spec_text(run_dir: Path, concurrency: int) -> str:
    text = (ROOT / "configs" / "demo.yaml").read_text()
    text = text.replace("workdir: ..", f"workdir: {ROOT}")
    lines = [line for line in text.splitlines() if not line.startswith("run_dir:")]
    return "\n".join([*lines, f"run_dir: {run_dir}", f"concurrency: {concurrency}", ""])


def one_run(tmp: Path, label: str, concurrency: int) -> float:
    spec = tmp / f"{label}.yaml"
    spec.write_text(spec_text(tmp / label, concurrency))
    exe = Path(sys.executable).with_name("zeus-run")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "zeus_run"]
    t0 = time.perf_counter()
    proc = subprocess.run([*argv, "run", str(spec), "--no-output", "-q"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{label} failed (exit {proc.returncode}):\n{proc.stderr}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="runs of each setting (default 3)")
    ap.add_argument("--concurrency", type=int, default=2, help="recurrences in flight to compare with 1 (default 2)")
    args = ap.parse_args()
    times: dict[int, list[float]] = {1: [], args.concurrency: []}
    with tempfile.TemporaryDirectory(prefix="zeus-bench-conc-") as d:
        tmp = Path(d)
        for i in range(args.repeats):
            for n in times:
                wall = one_run(tmp, f"c{n}-{i}", n)
                times[n].append(wall)
                print(f"run {i + 1}: concurrency {n}: {wall:6.2f} s", flush=True)
    one, many = statistics.median(times[1]), statistics.median(times[args.concurrency])
    print(f"CPUs: {os.cpu_count()}; load average before the last run: {os.getloadavg()[0]:.2f}")
    print(
        f"median wall time, demo (20 recurrences): concurrency 1: {one:.2f} s, concurrency {args.concurrency}: {many:.2f} s"
    )
    print(f"ratio: {many / one:.2f}x (goal for 2: at most 0.65x)")


if __name__ == "__main__":
    main()
