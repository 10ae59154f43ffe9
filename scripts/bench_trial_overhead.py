#!/usr/bin/env python3
"""Per-trial overhead of the launcher: a trivial trial run through `run_job` vs the same command run bare.

The script prints its metric and exits at once, so what remains is the
launcher's own work per trial: planning, the crash marker, watching,
stopping, sweeping the trial's processes, and the durable history append.

``--lines N`` measures the launcher's cost per metric line instead: each trial
prints N metric lines (the last one reaches the target), and the launcher's
own CPU time per line is what N lines cost beyond one (every line is an epoch:
matched, judged by the stop rule, metered; the CPU-time estimate reads the
script's CPU time from ``/proc`` at every epoch). ``--compare DIR ...`` runs the
same measurement on other checkouts of zeus-run (e.g. an earlier revision
unpacked with ``git archive REV | tar -x -C DIR``), alternately, one process
per measurement, so that a machine whose load changes loads each alike; it
prints each round with the machine's load average, then the medians.

Examples:

    python scripts/bench_trial_overhead.py --trials 40
    python scripts/bench_trial_overhead.py --lines 5000
    python scripts/bench_trial_overhead.py --lines 5000 --compare /tmp/zeus-old . --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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

#: N metric lines: N - 1 below the target, then one that reaches it (written in blocks, as a buffered script does).
LINES = (
    "import sys; w = sys.stdout.write; [w('val=0.5\\\\n') for _ in range(%d)]; w('val=1.0\\\\n'); sys.stdout.flush()"
)

SPEC_LINES = """
name: lines
command: ["{python}", "-S", "-c", "%s"]
env: {PYTHONUNBUFFERED: ""}
batch_sizes: [1]
default_batch_size: 1
target_metric: 0.9
max_epochs: %d
recurrences: %d
metric: {regex: 'val=([0-9.]+)'}
energy: {source: estimate, watts: 100}
run_dir: runs
"""


def _run_job():  # type: ignore[no-untyped-def]
    """`run_job` of the zeus-run on the path (a checkout from before the engine package has it at the top)."""
    try:
        from zeus_run.engine.runner import run_job
    except ImportError:
        from zeus_run.runner import run_job  # type: ignore[import-not-found,no-redef]
    return run_job


def launcher_cpu(lines: int, trials: int) -> float:
    """The launcher's CPU time (this process, every thread; unit: s) for ``trials`` trials of ``lines`` lines each."""
    from zeus_run.spec import parse_spec

    run_job = _run_job()
    with tempfile.TemporaryDirectory() as tmp:
        spec = parse_spec(SPEC_LINES % (LINES % (lines - 1), lines, trials), source=Path(tmp) / "job.yaml")
        start = time.process_time()
        records = run_job(spec).records
        cpu = time.process_time() - start
    assert len(records) == trials and all(r.epochs == lines for r in records), [r.epochs for r in records]
    return cpu


def per_line(lines: int, trials: int) -> dict[str, object]:
    """Launcher CPU per metric line (unit: s): what ``lines`` lines cost beyond one, per line."""
    import zeus_run

    one = launcher_cpu(1, trials)
    many = launcher_cpu(lines, trials)
    return {"per_line": (many - one) / trials / (lines - 1), "one_line_trial": one / trials, "src": zeus_run.__file__}


def compare(trees: list[str], lines: int, trials: int, rounds: int) -> int:
    results: dict[str, list[float]] = {t: [] for t in trees}
    for r in range(rounds):
        order = trees if r % 2 == 0 else trees[::-1]  # alternate which goes first
        for tree in order:
            load = os.getloadavg()[0]
            env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
            env.pop("PYTHONUNBUFFERED", None)
            out = subprocess.run(
                [sys.executable, __file__, "--lines", str(lines), "--trials", str(trials), "--json"],
                capture_output=True,
                text=True,
                env=env,
                cwd=tree,
                check=True,
            )
            got = json.loads(out.stdout.strip().splitlines()[-1])
            assert got["src"].startswith(str(Path(tree).resolve())), (tree, got["src"])
            results[tree].append(got["per_line"])
            print(
                f"round {r + 1} {tree}: {got['per_line'] * 1e6:7.1f} us per metric line "
                f"(load {load:.2f} before, {os.getloadavg()[0]:.2f} after)",
                flush=True,
            )
    base = statistics.median(results[trees[0]])
    for tree in trees:
        m = statistics.median(results[tree])
        print(f"median {tree}: {m * 1e6:7.1f} us per metric line ({m / base:.2f}x {trees[0]}; {rounds} rounds)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=None, help="trials per measurement (default: 40, or 3 with --lines)")
    ap.add_argument("--repeats", type=int, default=3, help="measure this many times; the median is reported")
    ap.add_argument("--lines", type=int, default=None, help="measure the launcher's CPU time per metric line")
    ap.add_argument("--compare", nargs="+", metavar="DIR", help="checkouts to measure alternately (with --lines)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of --compare")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = ap.parse_args(argv)
    if args.lines is not None:
        if args.lines < 2:
            ap.error("--lines must be at least 2")
        trials = args.trials or 3
        if args.compare:
            return compare(args.compare, args.lines, trials, args.rounds)
        got = per_line(args.lines, trials)
        if args.json:
            print(json.dumps(got))
        else:
            print(
                f"launcher CPU per metric line: {float(got['per_line']) * 1e6:7.1f} us ({args.lines} lines x {trials} trials)"
            )
        return 0
    from zeus_run.spec import parse_spec

    run_job = _run_job()
    n = args.trials or 40
    cmd = [sys.executable, "-S", "-c", "print('val=1.0', flush=True)"]
    bare, full = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(n):
            subprocess.run(cmd, capture_output=True, check=True)
        bare.append((time.perf_counter() - start) / n)
        with tempfile.TemporaryDirectory() as tmp:
            spec = parse_spec(SPEC % n, source=Path(tmp) / "job.yaml")
            start = time.perf_counter()
            run_job(spec)
            full.append((time.perf_counter() - start) / n)
    b, f = statistics.median(bare), statistics.median(full)
    print(f"bare command:         {b * 1000:7.1f} ms per run")
    print(f"through run_job:      {f * 1000:7.1f} ms per trial")
    print(f"launcher overhead:    {(f - b) * 1000:7.1f} ms per trial (median of {args.repeats} x {n})")
    return 0


if __name__ == "__main__":
    sys.path.insert(
        0, os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] or str(Path(__file__).resolve().parents[1])
    )
    sys.exit(main())
