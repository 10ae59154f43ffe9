#!/usr/bin/env python3
"""Benchmark the batch-size policies on the Zeus paper's traces.

Runs the six recurring jobs on each GPU and seed over the paper's horizon
(eta 0.5, beta 2.0) with the faithful ``zeus`` policy and ``zeus-plus``, and
prints per (job, gpu) the medians over seeds of cost / Default and regret vs
Oracle, the median over rows, and the wall time.

Example:

    python scripts/bench_optimizer.py --traces ../shared/traces --gpus v100,a40 --seeds 1-5
    python scripts/bench_optimizer.py --traces ../shared/traces --gpus v100 --seeds 1 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zeus_run.errors import TraceError, ZeusRunError
from zeus_run.sim import JOBS, job_table, load_traces, simulate
from zeus_run.spec import OptimizerSettings

POLICIES = ("zeus", "zeus-plus")


def parse_seeds(text: str) -> list[int]:
    """``1-5`` or ``1,3,7`` (or a mix) -> list of seeds."""
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--traces", required=True, type=Path, help="directory with summary_train.csv and summary_power_<gpu>.csv"
    )
    ap.add_argument("--gpus", default="v100,a40", help="comma-separated GPU names (default: v100,a40)")
    ap.add_argument("--seeds", default="1-5", help="seeds, e.g. 1-5 or 1,2,3 (default: 1-5)")
    ap.add_argument("--jobs", default=",".join(JOBS), help="comma-separated job names (default: the six paper jobs)")
    ap.add_argument("--policies", default=",".join(POLICIES), help="comma-separated policies (default: zeus,zeus-plus)")
    ap.add_argument(
        "--max-early-stops",
        type=int,
        default=None,
        help="switch on the fallback rule: after N early stops a recurrence runs its best known batch size "
        "without a threshold (default: off, the paper's semantics)",
    )
    ap.add_argument("--json", action="store_true", help="one JSON object per (policy, job, gpu, seed)")
    args = ap.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError:
        ap.error(f"--seeds {args.seeds!r}: use e.g. 1-5 or 1,2,3")
    try:
        return run(args, seeds)
    except ZeusRunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace, seeds: list[int]) -> int:
    gpus = [g for g in args.gpus.split(",") if g]
    jobs = [j for j in args.jobs.split(",") if j]
    policies = [p for p in args.policies.split(",") if p]
    unknown = [j for j in jobs if j not in JOBS]
    if unknown:
        print(f"error: unknown job(s) {', '.join(unknown)}; known: {', '.join(JOBS)}", file=sys.stderr)
        return 2
    tables = {}
    for gpu in gpus:
        traces = load_traces(args.traces / "summary_train.csv", args.traces / f"summary_power_{gpu}.csv")
        for job in jobs:
            try:
                tables[job, gpu] = job_table(traces, JOBS[job])
            except TraceError as exc:
                print(f"skipping {job} on {gpu}: {exc}", file=sys.stderr)
    for policy in policies:
        settings = OptimizerSettings.for_policy(policy)
        start = time.perf_counter()
        rows = []
        for gpu in gpus:
            for job in jobs:
                if (job, gpu) not in tables:
                    continue
                results = [
                    simulate(
                        tables[job, gpu],
                        eta=0.5,
                        beta=2.0,
                        seed=s,
                        settings=settings,
                        baselines=False,
                        max_early_stops=args.max_early_stops,
                    )
                    for s in seeds
                ]
                rows.append((job, gpu, results))
        wall = time.perf_counter() - start
        if args.json:
            for _, _, results in rows:
                for r in results:
                    print(json.dumps(r.to_json()))
        else:
            print_table(
                policy if args.max_early_stops is None else f"{policy}, max_early_stops {args.max_early_stops}",
                rows,
                wall,
            )
    return 0


def print_table(policy: str, rows: list, wall: float) -> None:
    print(f"policy {policy}")
    print(f"{'job':<14}{'gpu':<6}{'horizon':>8}{'cost/Default':>14}{'regret':>9}")
    regrets = []
    for job, gpu, results in rows:
        cost_ratio = statistics.median(r.cost / r.default_cost for r in results)
        regret = statistics.median(r.regret for r in results)
        regrets.append(regret)
        print(f"{job:<14}{gpu:<6}{results[0].horizon:>8}{cost_ratio:>14.3f}{regret * 100:>8.1f}%")
    if regrets:
        print(f"median regret over {len(rows)} rows: {statistics.median(regrets) * 100:.2f}%")
    print(f"wall time: {wall:.2f} s ({sum(len(r[2]) for r in rows)} simulations)")
    print()


if __name__ == "__main__":
    sys.exit(main())
