"""Start-up latency of the ``zeus-run`` command line.

Runs ``zeus-run --help`` (and a few other cheap invocations) several times in
fresh interpreters and prints the median wall time of each. Exits 1 when the
median of ``--help`` is above the budget, so CI can run it::

    python scripts/bench_startup.py                 # budget 250 ms, 7 runs each
    python scripts/bench_startup.py --runs 15 --budget-ms 200

Timings include interpreter start-up, as a user's shell sees them. On a loaded
machine the figures are noisy; the median of several runs damps that.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

#: What a user types, as arguments to ``python -m zeus_run``.
CASES = {
    "--help": ["--help"],
    "history --help": ["history", "--help"],
    "--version": ["--version"],
}


def time_once(args: list[str]) -> float:
    """Wall time of one ``python -m zeus_run ARGS`` (unit: s)."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "zeus_run", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"zeus-run {' '.join(args)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="Runs per case (default 7).")
    parser.add_argument("--budget-ms", type=float, default=250.0, help="Budget for --help's median (default 250).")
    args = parser.parse_args()
    time_once(["--help"])  # warm the file cache and the bytecode
    medians = {}
    for name, argv in CASES.items():
        times = [time_once(argv) for _ in range(args.runs)]
        medians[name] = statistics.median(times)
        print(
            f"zeus-run {name:<16} median {medians[name] * 1000:6.0f} ms   "
            f"min {min(times) * 1000:6.0f} ms   max {max(times) * 1000:6.0f} ms   ({args.runs} runs)"
        )
    bare = statistics.median([_time_bare() for _ in range(args.runs)])
    print(f"python -c pass            median {bare * 1000:6.0f} ms   (interpreter alone)")
    help_ms = medians["--help"] * 1000
    if help_ms > args.budget_ms:
        print(f"FAIL: zeus-run --help median {help_ms:.0f} ms is above the {args.budget_ms:.0f} ms budget")
        return 1
    print(f"OK: zeus-run --help median {help_ms:.0f} ms is within the {args.budget_ms:.0f} ms budget")
    return 0


def _time_bare() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.exit(main())
