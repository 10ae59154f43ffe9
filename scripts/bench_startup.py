"""Start-up latency of the ``zeus-run`` command line.

Runs ``zeus-run --help`` (and a few other cheap invocations) several times in
fresh interpreters, interleaved with the bare interpreter (``python -c pass``)
so that a busy machine slows them alike, and prints the median wall time of
each and how far ``--help`` is above the bare interpreter (the median of the
paired differences). Exits 1 when that is above the budget, so CI can run it::

    python scripts/bench_startup.py                 # budget 100 ms above the interpreter, 9 runs each
    python scripts/bench_startup.py --runs 15 --budget-ms 50

The goal is 60 ms for ``--help``'s median on an idle machine (`GOAL_MS`,
printed). CI checks what zeus-run adds to the interpreter's own start-up,
which a shared machine slows alike: on a machine so busy that ``python -c pass``
takes 250 ms, an absolute budget would fail on the interpreter alone. ``--help`` and
``--version`` are answered without loading typer or any command
(`zeus_run.cli.root_help`); a command's ``--help`` loads typer and that command
only. Timings include interpreter start-up, as a user's shell sees them.
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
#: The goal for ``zeus-run --help``'s median on an idle machine (unit: ms).
GOAL_MS = 60.0


def time_once(args: list[str]) -> float:
    """Wall time of one ``python -m zeus_run ARGS`` (``python -c pass`` for None) (unit: s)."""
    argv = [sys.executable, "-c", "pass"] if not args else [sys.executable, "-m", "zeus_run", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"zeus-run {' '.join(args)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9, help="Runs per case (default 9).")
    parser.add_argument(
        "--budget-ms",
        type=float,
        default=100.0,
        help="Budget for --help above the bare interpreter (median of paired runs; default 100).",
    )
    args = parser.parse_args()
    time_once(["--help"])  # warm the file cache and the bytecode
    time_once(["history", "--help"])
    times: dict[str, list[float]] = {name: [] for name in ("bare", *CASES)}
    for _ in range(args.runs):  # interleaved: a burst of load slows every case alike
        times["bare"].append(time_once([]))
        for name, argv in CASES.items():
            times[name].append(time_once(argv))
    for name in CASES:
        t = times[name]
        print(
            f"zeus-run {name:<16} median {statistics.median(t) * 1000:6.0f} ms   "
            f"min {min(t) * 1000:6.0f} ms   max {max(t) * 1000:6.0f} ms   ({args.runs} runs)"
        )
    bare = statistics.median(times["bare"])
    print(f"python -c pass            median {bare * 1000:6.0f} ms   (interpreter alone)")
    above = statistics.median(h - b for h, b in zip(times["--help"], times["bare"], strict=True))
    print(f"zeus-run --help is {above * 1000:.0f} ms above the bare interpreter (median of the paired runs)")
    print(f"goal: zeus-run --help a median of {GOAL_MS:.0f} ms or less on an idle machine")
    if above * 1000 > args.budget_ms:
        print(
            f"FAIL: zeus-run --help is {above * 1000:.0f} ms above the interpreter, over the {args.budget_ms:.0f} ms budget"
        )
        return 1
    print(
        f"OK: zeus-run --help is {above * 1000:.0f} ms above the interpreter, within the {args.budget_ms:.0f} ms budget"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
