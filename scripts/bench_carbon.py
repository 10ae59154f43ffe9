#!/usr/bin/env python3
"""Start when the grid is clean: the carbon the start planner saves on every night of a real intensity series.

For every night of the series, a recurring job from the shared traces (its recurrences' durations and
energies as the simulator produces them, one recurrence a night, scaled with ``--hours`` to a mean run of H
hours) is planned by the same planner as real runs (`zeus_run.start.plan`): triggered at ``--trigger``, due
by ``--by`` (the next such time of day, UTC), sized by its own earlier runs at the same batch size and power
limit. It prints the carbon saved against starting on time (energy x the actual intensity integrated over
each run's span), the oracle's saving (the actual intensity and the run's actual duration known in
advance), following the forecast blindly (the forecast's lowest window, no skill check), and the deadline
misses (runs that end after the deadline though they would have finished in time started on time; runs too
long for the window even on time are counted apart, ``late_anyway``).

Forecast kinds: ``perfect`` (the actual series), ``persistence`` (the same hours one day earlier),
``noisy:S`` (the actual series times 1 + e, e(t+1) = 0.9 e(t) + sqrt(0.19) S z, scaled by the lead time as
a fraction of the window, seeded). Several kinds may be given, comma-separated.

Examples:

    python scripts/bench_carbon.py --intensity ../shared/carbon/gb_ci.csv --trigger 00:00 --by 08:00 --forecast perfect
    python scripts/bench_carbon.py --intensity ../shared/carbon/de_ci.csv --trigger 22:00 --by 08:00 --hours 5 \
        --forecast perfect,persistence,noisy:0.1,noisy:0.2 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zeus_run.errors import UsageError
from zeus_run.sim import JOBS, job_table, load_traces, simulate
from zeus_run.start import (
    DAY,
    Forecast,
    Noisy,
    Perfect,
    Persistence,
    Series,
    Window,
    best_start,
    parse_clock,
    plan,
    planned,
)

REPO = Path(__file__).resolve().parents[1]


def forecast_of(kind: str, actual: Series, seed: int) -> Forecast:
    """The forecast of ``kind`` over the actual series."""
    if kind == "perfect":
        return Perfect(actual)
    if kind == "persistence":
        return Persistence(actual)
    if kind.startswith("noisy:"):
        try:
            sigma = float(kind.split(":", 1)[1])
        except ValueError:
            sigma = -1.0
        if sigma >= 0:
            return Noisy(actual, sigma, seed, provenance=kind)
    raise UsageError(
        f"--forecast {kind!r} is not a forecast kind; use perfect, persistence or noisy:S (e.g. noisy:0.1)"
    )


def windows(actual: Series, trigger: str, by: str) -> list[Window]:
    """One window a night, every night the series covers."""
    h, m = parse_clock(trigger)
    first = np.floor(actual.first / DAY) * DAY
    out = []
    day = first
    while day <= actual.last:
        w = Window.of(day + h * 3600 + m * 60, by=by)
        if actual.covers(w.trigger, w.deadline):
            out.append(w)
        day += DAY
    return out


def nights_of(
    job: str, gpu: str, traces: Path, nights: int, hours: float, seed: int
) -> list[tuple[tuple, float, float]]:
    """Each recurrence's (batch size, power limit) key, duration (unit: s, scaled to a mean of ``hours``) and
    energy (unit: J), as the simulator runs the job."""
    tr = load_traces(traces / "summary_train.csv", traces / f"summary_power_{gpu}.csv")
    result = simulate(job_table(tr, JOBS[job]), seed=seed, horizon=nights, baselines=False)
    by_rec: dict[int, list] = defaultdict(list)
    for r in result.records:
        by_rec[r.recurrence].append(r)
    runs = []
    for n in sorted(by_rec):
        rs = by_rec[n]
        runs.append(((rs[0].batch_size, rs[0].power_limit), sum(r.time for r in rs), sum(r.energy for r in rs)))
    scale = hours * 3600 / (sum(r[1] for r in runs) / len(runs))
    return [(k, t * scale, e) for k, t, e in runs]


def measure(kind: str, actual: Series, wins: list[Window], runs: list, seed: int, min_saving: float) -> dict:
    """Plan every night with the forecast ``kind``; the savings, misses and the planner's cost per decision."""
    fc = forecast_of(kind, actual, seed)
    history: dict[tuple, list[float]] = defaultdict(list)
    on_time = planned_c = oracle_c = blind_c = 0.0
    misses = late = moved = 0
    costs = []
    for w, (key, dur, energy) in zip(wins, runs, strict=True):
        t0 = time.perf_counter()
        p = plan(w, history[key], fc, actual, min_saving=min_saving)
        costs.append(time.perf_counter() - t0)
        history[key].append(dur)
        base = float(actual.mean(w.trigger, w.trigger + dur))
        on_time += energy * base
        planned_c += energy * float(actual.mean(p.start_at, p.start_at + dur))
        moved += p.moved
        if w.trigger + dur > w.deadline:
            late += 1
        elif p.start_at + dur > w.deadline:
            misses += 1
        _, m, _ = best_start(actual, w, dur)
        oracle_c += energy * (m if w.trigger + dur <= w.deadline else base)
        d = planned(history[key][:-1])
        if d.seconds is not None and w.trigger + d.seconds <= w.deadline:
            typical = d.typical if d.typical is not None else d.seconds
            sb, _, _ = best_start(fc.predict(w.trigger, w.trigger, w.deadline), w, typical, w.deadline - d.seconds)
            blind_c += energy * float(actual.mean(sb, sb + dur))
        else:
            blind_c += energy * base
    saving, oracle = 1 - planned_c / on_time, 1 - oracle_c / on_time
    return {
        "forecast": kind,
        "saving": round(saving, 5),
        "oracle_saving": round(oracle, 5),
        "of_oracle": round(saving / oracle, 4) if oracle > 0 else None,
        "blind_saving": round(1 - blind_c / on_time, 5),
        "misses": misses,
        "late_anyway": late,
        "moved": moved,
        "nights": len(wins),
        "ms_per_decision_mean": round(1000 * float(np.mean(costs)), 3),
        "ms_per_decision_max": round(1000 * float(np.max(costs)), 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--intensity", type=Path, required=True, help="a timestamp,value CSV of the actual intensity")
    ap.add_argument("--trigger", required=True, help="HH:MM (UTC) the job is triggered at")
    ap.add_argument("--by", required=True, help="HH:MM (UTC) it is due by (the next such time after the trigger)")
    ap.add_argument("--forecast", default="perfect", help="perfect, persistence or noisy:S; several comma-separated")
    ap.add_argument("--hours", type=float, default=2.0, help="mean run length in hours (default 2)")
    ap.add_argument("--json", action="store_true", help="one JSON record per forecast")
    ap.add_argument("--seed", type=int, default=1, help="seed of the simulator and of noisy forecasts (default 1)")
    ap.add_argument("--job", default="cifar100", choices=sorted(JOBS), help="trace job (default cifar100)")
    ap.add_argument("--gpu", default="v100", help="trace GPU (default v100)")
    ap.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "traces", help="traces directory")
    ap.add_argument("--min-saving", type=float, default=0.0, help="the planner's min_saving (default 0)")
    args = ap.parse_args(argv)
    try:
        actual = Series.read(args.intensity)
        wins = windows(actual, args.trigger, args.by)
        kinds = [k.strip() for k in args.forecast.split(",") if k.strip()]
        for k in kinds:
            forecast_of(k, actual, args.seed)
    except (UsageError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    runs = nights_of(args.job, args.gpu, args.traces, len(wins), args.hours, args.seed)
    common = {"intensity": args.intensity.name, "trigger": args.trigger, "by": args.by, "hours": args.hours}
    if not args.json:
        print(
            f"{args.intensity.name} trigger {args.trigger} by {args.by}, {args.hours:g} h runs ({args.job} on {args.gpu}), {len(wins)} nights"
        )
        print(
            f"{'forecast':<13}{'saving':>9}{'oracle':>9}{'of oracle':>11}{'blind':>9}{'misses':>8}{'moved':>7}{'ms mean/max':>13}"
        )
    for k in kinds:
        rec = {**common, **measure(k, actual, wins, runs, args.seed, args.min_saving)}
        if args.json:
            print(json.dumps(rec))
        else:
            of = "-" if rec["of_oracle"] is None else f"{rec['of_oracle']:.0%}"
            print(
                f"{k:<13}{rec['saving']:>+9.2%}{rec['oracle_saving']:>+9.2%}{of:>11}{rec['blind_saving']:>+9.2%}"
                f"{rec['misses']:>8}{rec['moved']:>7}{rec['ms_per_decision_mean']:>7.1f}/{rec['ms_per_decision_max']:<5.0f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
