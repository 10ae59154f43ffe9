#!/usr/bin/env python3
"""Benchmark: replay (audit and what-if) of a 10,000-trial history.

Builds a synthetic run directory (spec.yaml + history.jsonl) by driving the
real engine with a synthetic executor, then times reading the history,
auditing every decision, and a what-if replay. Goal (idle machine): read + audit under 0.5 s, and the
audit no dearer than reading the history twice (it re-derives the launcher's decisions, one per record).

Usage: python scripts/bench_replay.py [--trials 10000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from zeus_run.engine.core import Engine, TrialRequest
from zeus_run.engine.replay import Knobs, audit, what_if, with_changes
from zeus_run.optimizer import make_optimizer
from zeus_run.records import TrialRecord
from zeus_run.rundir.history import HistoryStore, read_history
from zeus_run.rundir.store import atomic_write
from zeus_run.spec import OptimizerSettings

BATCH_SIZES = (16, 32, 64, 128, 256, 512, 1024)
EPOCHS = {16: 4, 32: 4, 64: 5, 128: 6, 256: 9, 512: 14, 1024: 0}  # 0: never converges
TPE = {16: 8.0, 32: 5.0, 64: 3.5, 128: 2.8, 256: 2.4, 512: 2.2, 1024: 2.1}  # s per epoch


def make_history(n_trials: int, run_dir: Path) -> int:
    knobs = Knobs(BATCH_SIZES, 256, 0.5, 2.0, 7, OptimizerSettings(), 0.9, True, 20, 20)
    rng = np.random.default_rng(0)

    def execute(req: TrialRequest) -> TrialRecord:
        bs = req.decision.batch_size
        need = EPOCHS[bs] + int(rng.integers(0, 2)) if EPOCHS[bs] else 0
        tpe = TPE[bs] * (1 + 0.05 * rng.random())
        limit = knobs.max_epochs
        if math.isfinite(req.cost_threshold):
            limit = min(limit, int(req.cost_threshold // (tpe * 300)))
        reached = 0 < need <= limit
        epochs = need if reached else max(limit, 1)
        t, e = epochs * tpe, epochs * tpe * 200
        metrics = tuple(0.95 if reached and i == epochs else 0.5 for i in range(1, epochs + 1))
        return TrialRecord(
            job="bench",
            recurrence=req.recurrence,
            attempt=req.attempt,
            trial=req.trial,
            batch_size=bs,
            stage=req.decision.stage,
            epochs=epochs,
            time=t,
            energy=e,
            max_power=400.0,
            cost=0.5 * e + 0.5 * 400 * t,
            reached=reached,
            stop_reason="target_reached" if reached else "max_epochs",
            cost_threshold=None if math.isinf(req.cost_threshold) else req.cost_threshold,
            metrics=metrics,
            energy_source="estimate",
            estimated=True,
        )

    records: list[TrialRecord] = []
    engine = Engine(make_optimizer(knobs.optimizer, BATCH_SIZES, 256, 7), 10**9, 20, 2.0)

    def keep(r: TrialRecord) -> None:
        records.append(r)
        if len(records) >= n_trials:
            raise StopIteration

    try:
        engine.run([], execute, keep)
    except StopIteration:
        pass
    spec = {
        "batch_sizes": list(BATCH_SIZES),
        "default_batch_size": 256,
        "eta": 0.5,
        "beta": 2.0,
        "seed": 7,
        "optimizer": OptimizerSettings().__dict__,
        "target_metric": 0.9,
        "higher_is_better": True,
        "max_epochs": 20,
        "max_tries": 20,
    }
    atomic_write(run_dir / "spec.yaml", yaml.safe_dump(spec))
    path = run_dir / "history.jsonl"
    with open(path, "w") as f:  # bulk write for the benchmark's set-up only
        import json

        for r in records:
            f.write(json.dumps(r.to_json(), separators=(",", ":")) + "\n")
    assert HistoryStore(path).read()  # readable by the real reader
    return len(records)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--keep", type=Path, default=None, help="write the run directory here instead of a temp dir")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.keep or Path(tmp)
        run_dir.mkdir(parents=True, exist_ok=True)
        n = make_history(args.trials, run_dir)
        t0 = time.perf_counter()
        records = read_history(run_dir)
        t1 = time.perf_counter()
        knobs = Knobs.from_run_dir(run_dir)
        result = audit(records, knobs)
        t2 = time.perf_counter()
        wi = what_if(records, with_changes(knobs, eta=0.8), recorded=knobs)
        t3 = time.perf_counter()
    print(f"history: {n} trials, {len({r.recurrence for r in records})} recurrences")
    print(f"read history:       {t1 - t0:6.3f} s")
    print(
        f"audit (replay):     {t2 - t1:6.3f} s  ({result.checked} decisions reproduced, divergence: {result.divergence})"
    )
    print(
        f"what-if eta=0.8:    {t3 - t2:6.3f} s  ({wi.recurrences} recurrences, cost {wi.cost / wi.recorded_cost:.3f}x recorded)"
    )
    print(
        f"read + audit total: {t2 - t0:6.3f} s  (goal < 0.5 s idle; audit / read = {(t2 - t1) / (t1 - t0):.2f}, goal <= 2)"
    )


if __name__ == "__main__":
    main()
