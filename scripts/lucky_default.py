#!/usr/bin/env python3
"""A short life whose truth is set: the default's first run is lucky; what ``history`` states, night by night.

The job (a CPU job: energy is the CPU estimate, 100 W x time) has a known cost per batch size: epochs to the
target and seconds per epoch (pace ~ batch size^-0.25), each run's pace varying 5% (log scale, drawn from the
seed). The default (32) runs first, 12% faster than its pace (lucky). The real engine and optimizer decide every
night (`zeus_run.engine`; a try over its cost threshold is cut there); after each night the history's whole
saving (`zeus_run.views.summary.summarize`, what ``history`` states) is set beside the truth: what the job spent
against the default's true mean run for every night that delivered a model.

    python scripts/lucky_default.py --nights 30 --seed 1 [--control 0.05]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.factories import record_for
from zeus_run.engine.knobs import Knobs
from zeus_run.optimizer import OptimizerSettings
from zeus_run.views.summary import summarize

EPOCHS = {16: 6, 32: 5, 64: 4, 128: 5, 256: 6}
B0 = 32
WATTS = 100.0
SIGMA = 0.05
LUCK = 0.88


def per_epoch(bs: int) -> float:
    """Seconds per epoch at the machine's usual pace."""
    return (bs / B0) ** -0.25


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nights", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--control", type=float, default=None, help="saving.control.max_share (default: none)")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    knobs = Knobs(
        batch_sizes=tuple(EPOCHS),
        default_batch_size=B0,
        eta=0.5,
        beta=2.0,
        seed=args.seed,
        optimizer=OptimizerSettings(),
        target_metric=0.9,
        horizon=args.nights,
        **({} if args.control is None else {"control_share": args.control}),
    )
    first = [True]

    def execute(req):  # one try: its epochs at its pace, cut where the cost passes the threshold
        bs = req.decision.batch_size
        luck = LUCK if first[0] and bs == B0 else math.exp(rng.normal(0.0, SIGMA))
        first[0] = False
        t_epoch = per_epoch(bs) * luck
        cost_epoch = WATTS * t_epoch  # eta 0.5: 0.5 x energy + 0.5 x max power x time, energy = 100 W x time
        epochs, reached, reason = EPOCHS[bs], True, "target_reached"
        if epochs * cost_epoch > req.cost_threshold:
            epochs, reached, reason = max(int(req.cost_threshold // cost_epoch), 0), False, "cost_threshold"
        t = epochs * t_epoch if reached else req.cost_threshold / WATTS
        return record_for(
            req,
            epochs=epochs,
            time=t,
            energy=WATTS * t,
            cost=WATTS * t,
            max_power=WATTS,
            reached=reached,
            stop_reason=reason,
            estimated=True,
        )

    true_mean = EPOCHS[B0] * per_epoch(B0) * math.exp(SIGMA**2 / 2)  # seconds
    records: list = []
    print("night  ran         stated   90% interval         truth   held  default runs (controls)")
    for night in range(1, args.nights + 1):
        knobs.engine(night).run(list(records), execute, records.append)
        s = summarize(records, B0)
        saved = s.saved.get("time")
        delivered = len({r.recurrence for r in records if r.reached})
        truth = 1.0 - sum(r.time for r in records) / (delivered * true_mean)
        ran = ",".join(
            str(r.batch_size) + ("c" if r.stage == "control" else "") for r in records if r.recurrence == night
        )
        if saved is None or saved.ci is None:
            print(f"{night:5d}  {ran:10s}  {'-':>7s}   {'-':19s}  {truth * 100:6.1f}%")
            continue
        lo, hi = saved.ci
        held = "yes" if lo - 1e-9 <= truth <= hi + 1e-9 else "NO"
        base = s.baseline
        runs = f"{base.runs} ({getattr(base, 'controls', 0)})" if base is not None else "-"
        print(
            f"{night:5d}  {ran:10s}  {saved.value * 100:6.1f}%  {lo * 100:6.1f}% to {hi * 100:5.1f}%  "
            f"{truth * 100:6.1f}%  {held:4s}  {runs}"
        )
    s = summarize(records, B0)
    if s.baseline is not None and hasattr(s.baseline, "rests_on"):
        print(f"history: {s.baseline.rests_on}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
