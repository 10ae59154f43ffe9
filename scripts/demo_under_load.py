#!/usr/bin/env python3
"""Acceptance: the demo finishes every run on a loaded machine (no failed recurrence).

Starts CPU hogs (``yes >/dev/null``, two by default), then runs the demo job
(configs/demo.yaml) several times, each in a fresh run directory, and checks
that every run exits 0 with all its recurrences converged. Prints one line per
run (wall time, trials, early stops, fallback tries) and exits 1 if any run
failed.

A threshold learned while the machine was quiet makes every trial under load
look expensive; the fallback rule (``max_early_stops``) and the CPU-time
energy estimate are what let the runs finish.

Example:

    python scripts/demo_under_load.py                 # 10 runs beside 2 hogs (several minutes on 2 cores)
    python scripts/demo_under_load.py --runs 2 --recurrences 8
    python scripts/demo_under_load.py --runs 5 --quiet-start 3 --basis wall-time   # the harsh case
    python scripts/demo_under_load.py --runs 5 --quiet-start 3 --basis wall-time --max-early-stops null
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="demo runs (default 10)")
    ap.add_argument("--hogs", type=int, default=2, help="`yes >/dev/null` processes beside it (default 2)")
    ap.add_argument("--recurrences", type=int, default=None, help="override the demo's recurrences")
    ap.add_argument("--spec", type=Path, default=REPO / "configs" / "demo.yaml")
    ap.add_argument(
        "--quiet-start",
        type=float,
        default=0.0,
        help="start the hogs this many seconds into each run, so the run learns its costs on a quiet machine first",
    )
    ap.add_argument("--basis", choices=("cpu-time", "wall-time"), default=None, help="override energy.basis")
    ap.add_argument("--max-early-stops", default=None, help="override max_early_stops (a number, or null)")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="zeus-under-load-"))
    spec = _spec_copy(args, tmp)
    hogs: list[subprocess.Popen] = []
    failed = 0
    try:
        when = f"from {args.quiet_start:g} s into each run" if args.quiet_start else "running"
        print(f"{args.hogs} CPU hog(s) {when}; {args.runs} demo run(s) of {args.spec}")
        if args.basis or args.max_early_stops:
            print(
                f"overrides: energy.basis={args.basis or '(spec)'}, max_early_stops={args.max_early_stops or '(spec)'}"
            )
        print(f"{'run':>4} {'rc':>3} {'wall':>8} {'trials':>7} {'converged':>10} {'early stops':>12} {'fallbacks':>10}")
        for i in range(1, args.runs + 1):
            run_dir = tmp / f"run-{i}"
            cmd = [sys.executable, "-m", "zeus_run", "run", str(spec), "--run-dir", str(run_dir), "--no-output"]
            if args.recurrences:
                cmd += ["-n", str(args.recurrences)]
            start = time.perf_counter()
            if not args.quiet_start:
                hogs = hogs or _start(args.hogs)
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
            if args.quiet_start:
                try:
                    proc.wait(timeout=args.quiet_start)
                except subprocess.TimeoutExpired:
                    hogs = _start(args.hogs)
            _out, err = proc.communicate()
            r = subprocess.CompletedProcess(cmd, proc.returncode, _out, err)
            if args.quiet_start:
                _stop(hogs)
                hogs = []
            wall = time.perf_counter() - start
            hist = run_dir / "history.jsonl"
            recs = [json.loads(x) for x in hist.read_text().splitlines()] if hist.exists() else []
            want = args.recurrences or _recurrences(run_dir)
            converged = len({x["recurrence"] for x in recs if x["reached"]})
            early = sum(x["stop_reason"] == "cost_threshold" for x in recs)
            fallbacks = sum(x["stage"] == "fallback" for x in recs)
            ok = r.returncode == 0 and converged == want
            failed += not ok
            print(
                f"{i:>4} {r.returncode:>3} {wall:>7.1f}s {len(recs):>7} {converged:>7}/{want:<2} {early:>12} {fallbacks:>10}"
            )
            if not ok:
                print("     " + (r.stderr.strip().splitlines() or ["(no output)"])[-1])
            sys.stdout.flush()
    finally:
        _stop(hogs)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{args.runs - failed}/{args.runs} runs finished with every recurrence converged")
    return 1 if failed else 0


def _start(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(n)]


def _stop(hogs: list[subprocess.Popen]) -> None:
    for h in hogs:
        h.kill()
        h.wait()


def _spec_copy(args: argparse.Namespace, tmp: Path) -> Path:
    """The spec with the overrides applied (paths made absolute, since the copy lives elsewhere)."""
    import yaml

    if not (args.basis or args.max_early_stops):
        return args.spec
    data = yaml.safe_load(args.spec.read_text())
    base = args.spec.resolve().parent
    data["workdir"] = str((base / data.get("workdir", ".")).resolve())
    if args.basis:
        data.setdefault("energy", {})["basis"] = args.basis
    if args.max_early_stops:
        data["max_early_stops"] = None if args.max_early_stops == "null" else int(args.max_early_stops)
    out = tmp / args.spec.name
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def _recurrences(run_dir: Path) -> int:
    import yaml

    try:
        return int(yaml.safe_load((run_dir / "spec.yaml").read_text())["recurrences"])
    except (OSError, KeyError, TypeError, ValueError):
        return -1


if __name__ == "__main__":
    sys.exit(main())
