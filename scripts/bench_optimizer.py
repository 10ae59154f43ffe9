#!/usr/bin/env python3
"""Benchmark the batch-size policies on the Zeus paper's traces.

Runs each (job, gpu) row over the paper's horizon for every seed and policy,
and prints per row the median over seeds of cost / Default, the median and
90th percentile of regret vs Oracle and, where the trace directory has
``zeus_reference_200_seeds.jsonl``, the Zeus reference's 200-seed median.
Each row also shows the Default's regret and the *floor*: the regret of the
informed start (`zeus_run.sim.informed_start`), which knows the Oracle's batch
size but runs b0 first and profiles the limits of each batch size it runs, as
every policy here does (expected epochs, no noise). What a policy pays above the
floor is the price of learning which batch size is best. Column ``walk``: the
regret of the guided walk (`zeus_run.sim.guided_walk`), which knows where the
Oracle's batch size is but steps there one batch size a recurrence, as a walk
must, and sees the batch size beyond it once: what a policy that moves to
neighbouring batch sizes pays at the least.
Under each table: the median over rows, the worst row, rows worse than the
reference (eta 0.5, beta 2.0 only: the reference was measured there) and rows
worse than ``zeus`` on the same seeds (when ``zeus`` is benchmarked too), and
the grid's wall time.

``--noise P:LO-HI`` slows each recurrence, with probability P, by a factor
drawn in [LO, HI] (time and energy alike; `zeus_run.sim.Noise`); regret is
against the Oracle under the same noise, and each row also shows the tries per
recurrence (mean, max) and the share of recurrences that needed more than one.
``--life [SCALE]`` lives bad nights (`zeus_run.sim.Life`, drawn from the seed): out of memory at the
largest batch sizes, a slow night or a slow try (multiplied or added), an interrupted try, one lost to
the cluster, an environment error; the truth each run is judged against is what the default would have
spent over the same life (`zeus_run.sim._life`). SCALE multiplies how often (default 1).
``--life oom@N`` (or ``1,oom@N``; ``oom@N+M``: two nights) makes the Oracle's batch size and every larger
one run out of memory on night N alone: the job returns to it (`zeus_run.engine.memory`).
``--horizon N`` runs N recurrences instead of the paper's horizon (the
optimizer is told N, as a spec's ``recurrences``).

``--warm-from other-gpu`` (with exactly two GPUs in ``--gpus``) starts each row of the default
policy warm (``optimizer.warm_from``): from the default policy's simulated run of the same job and
seed on the other GPU, at the paper's horizon (`zeus_run.engine.warm`); ``zeus`` runs cold. Its
``--json`` records carry ``warm_from`` (the source) and ``warm`` (its fingerprint).

A row is worse than ``zeus`` when the 95% interval of a paired bootstrap over the seeds (the seeds
resampled together, `paired_interval`) of the difference of the two medians lies above zero: a
difference of medians alone is noise where the two rows are close.

``--concurrency 1,2,4`` runs the grid with that many recurrences in flight
(`zeus_run.sim.simulate`: the job is always backlogged, a recurrence starts the
moment one ends, and trials end in order of simulated time) and ends with a
table of each policy's median regret by concurrency: what overlap costs.

Example:

    python scripts/bench_optimizer.py --traces ../shared/traces                   # seeds 1-100, eta 0.5, beta 2
    python scripts/bench_optimizer.py --traces ../shared/traces --eta 0.2 --beta null
    python scripts/bench_optimizer.py --traces ../shared/traces --gpus v100 --seeds 1 --json
    python scripts/bench_optimizer.py --traces ../shared/traces --policies zeus,zeus-plus --concurrency 1,2,4
    python scripts/bench_optimizer.py --traces ../shared/traces --noise 0.1:1.5-3
    python scripts/bench_optimizer.py --traces ../shared/traces --horizon 24
    python scripts/bench_optimizer.py --traces ../shared/traces --horizon 24 --life
    python scripts/bench_optimizer.py --traces ../shared/traces --horizon 24 --warm-from other-gpu
    python scripts/bench_optimizer.py --traces ../shared/traces --revision 9     # the previous default
    python scripts/bench_optimizer.py --traces ../shared/traces --objective max-slowdown=1.05,max-slowdown=1.1

Under each table, the calibration of the saving ``history`` states (`zeus_run.views.saving`):
how often its 90% interval holds the true saving (1 - cost / Default, which only a simulation
knows), its median width, and how many runs it tells of a saving where the truth is a loss of
more than a point; the same for energy and time (1 - energy / Default's, 1 - time / Default's). ``--json`` records carry ``saved`` and ``saved_ci`` (each key of ``saved`` ->
``[low, high]``, fractions: the interval ``history`` states for that run).

``--objective A,B,...`` (`zeus_run.objective.parse_objective` forms) runs the grid once per
objective instead and prints, per row and objective, the median over seeds of the energy
saving against Default (1 - energy / Default's energy) and of the slowdown (time / Default's
time), Default being b0 at the max power limit every recurrence.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zeus_run.engine.warm import warm_start
from zeus_run.errors import TraceError, ZeusRunError
from zeus_run.objective import Objective, ObjectiveError, parse_objective
from zeus_run.sim import (
    JobTable,
    Life,
    Noise,
    guided_walk,
    informed_start,
    job_table,
    load_traces,
    oracle_baseline,
    simulate,
    trace_jobs,
)
from zeus_run.spec import DEFAULT_POLICY, POLICIES, WARM_REVISION, OptimizerSettings
from zeus_run.views.saving import calibrate

REFERENCE_FILE = "zeus_reference_200_seeds.jsonl"
#: Knobs the reference was measured with.
REFERENCE_KNOBS = (0.5, 2.0)
#: A run that costs more than this multiple of the Default's cost is counted (``>1.1xD``).
OVER_DEFAULT = 1.1
#: ``--warm-from`` sources.
WARM_SOURCES = ("other-gpu",)
#: Resamples of the paired bootstrap (`paired_interval`), and the share of them left out on each side.
BOOTSTRAP = 2000
BOOTSTRAP_TAIL = 0.025


@dataclass(frozen=True)
class Row:
    """One (job, gpu) row of one policy: per-seed outcomes, in seed order."""

    job: str
    gpu: str
    horizon: int
    regrets: tuple[float, ...]
    cost_ratios: tuple[float, ...]
    summaries: tuple[dict, ...] = ()
    #: Trials of every recurrence of every seed.
    tries: tuple[int, ...] = ()
    #: Default's expected cost / Oracle's.
    default_vs_oracle: float = math.nan
    #: The informed start's expected regret (`zeus_run.sim.informed_start`): b0 once, then the Oracle's batch size.
    floor: float = math.nan
    #: The guided walk's expected regret (`zeus_run.sim.guided_walk`): one batch size a recurrence to the Oracle's.
    walk: float = math.nan
    #: Per seed: the true cost saving (1 - cost_vs_default) and the 90% interval `history` states (None: none yet).
    saved_ci: tuple[tuple[float, tuple[float, float] | None], ...] = ()
    #: The same of energy and of time.
    saved_energy_ci: tuple[tuple[float, tuple[float, float] | None], ...] = ()
    saved_time_ci: tuple[tuple[float, tuple[float, float] | None], ...] = ()

    @property
    def mean_tries(self) -> float:
        return statistics.fmean(self.tries) if self.tries else math.nan

    @property
    def retried(self) -> float:
        """Share of recurrences that needed more than one try."""
        return sum(t > 1 for t in self.tries) / len(self.tries) if self.tries else math.nan

    @property
    def median(self) -> float:
        return statistics.median(self.regrets)

    @property
    def p90(self) -> float:
        return float(np.percentile(self.regrets, 90))

    @property
    def mean(self) -> float:
        return statistics.fmean(self.regrets)

    @property
    def over_default(self) -> float:
        """Share of runs that cost more than `OVER_DEFAULT` x the Default."""
        return sum(c > OVER_DEFAULT for c in self.cost_ratios) / len(self.cost_ratios)

    @property
    def default_regret(self) -> float:
        """The Default's regret against the Oracle (the same on every seed, noise or not)."""
        return self.default_vs_oracle - 1.0


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


def parse_beta(text: str) -> float | None:
    """``2.0`` -> 2.0; ``null`` or ``none`` -> None (early stopping off)."""
    if text.lower() in ("null", "none", "off"):
        return None
    value = float(text)
    if value <= 0:
        raise ValueError(text)
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument(
        "--traces", required=True, type=Path, help="directory with summary_train.csv and summary_power_<gpu>.csv"
    )
    ap.add_argument("--gpus", default="v100,a40", help="comma-separated GPU names (default: v100,a40)")
    ap.add_argument("--seeds", default="1-100", help="seeds, e.g. 1-100 or 1,2,3 (default: 1-100)")
    ap.add_argument(
        "--jobs",
        default=None,
        help="comma-separated job names (default: every job of the traces directory's jobs.csv, else the six paper "
        "jobs)",
    )
    ap.add_argument(
        "--policies",
        default=",".join(dict.fromkeys(("zeus", DEFAULT_POLICY))),
        help=f"comma-separated policies among {', '.join(POLICIES)} (default: zeus and the default policy)",
    )
    ap.add_argument("--eta", type=float, default=0.5, help="cost knob in [0, 1] (default: 0.5)")
    ap.add_argument("--beta", default="2.0", help="early-stop knob, or null to disable it (default: 2.0)")
    ap.add_argument(
        "--workers",
        type=int,
        default=min(os.cpu_count() or 1, 8),
        help="processes simulating rows in parallel (default: the CPU count, at most 8; 1: in this process)",
    )
    ap.add_argument(
        "--max-early-stops",
        type=int,
        default=None,
        help="switch on the fallback rule: after N early stops a recurrence runs its best known batch size "
        "without a threshold (default: off, the paper's semantics)",
    )
    ap.add_argument(
        "--concurrency",
        default="1",
        help="recurrences in flight, or a comma-separated list of them to compare, e.g. 1,2,4 (default: 1)",
    )
    ap.add_argument(
        "--noise",
        default=None,
        help="P:LO-HI: each recurrence runs LO-HI times slower with probability P, e.g. 0.1:1.5-3 (default: none)",
    )
    ap.add_argument(
        "--life",
        nargs="?",
        const="1",
        default=None,
        help="[SCALE]: live bad nights (out of memory, slow nights and tries, interruptions, cluster losses, an "
        "environment error), SCALE times as often as the default life (default: none; --life alone: 1); "
        "oom@N: the Oracle's batch size runs out of memory on night N alone (oom@N+M: nights N and M; 1,oom@N: both)",
    )
    ap.add_argument(
        "--control",
        type=float,
        default=None,
        metavar="SHARE",
        help="re-run the default as a control while the saving is too wide to say anything, within SHARE of the "
        "spend (a spec's saving.control.max_share, e.g. 0.05; default: none, the published algorithm)",
    )
    ap.add_argument(
        "--horizon",
        default=None,
        help="recurrences per run, told to the optimizer as a spec's recurrences, or a comma-separated list of them "
        "(paper: the paper's horizon), e.g. paper,24,10: one table each, warm starts drawn once (default: paper)",
    )
    ap.add_argument(
        "--judge-on",
        default=None,
        help="leave one GPU out: simulate and print only this GPU's rows; the other GPUs of --gpus serve only as "
        "--warm-from sources (default: every GPU of --gpus)",
    )
    ap.add_argument(
        "--json-out",
        type=Path,
        default=None,
        help="also write the --json records to this file (JSON Lines), beside the tables",
    )
    ap.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a --json-out file of another run on the same rows and seeds: list the rows whose median regret the "
        "paired bootstrap puts above or below it, per horizon",
    )
    ap.add_argument(
        "--revision",
        type=int,
        default=None,
        help="zeus-voi's revision, to compare with an earlier one (default: the current)",
    )
    ap.add_argument(
        "--objective",
        default=None,
        help="comma-separated objectives, e.g. max-slowdown=1.1,energy: print energy saving and slowdown "
        "vs Default per row for each (default: the cost with --eta, and the regret tables)",
    )
    ap.add_argument(
        "--warm-from",
        choices=WARM_SOURCES,
        default=None,
        help="other-gpu: start the default policy's rows warm from its run of the same job and seed on the other "
        "GPU of --gpus, at the paper's horizon (default: a cold start)",
    )
    ap.add_argument("--json", action="store_true", help="one JSON object per (policy, job, gpu, seed)")
    args = ap.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError:
        ap.error(f"--seeds {args.seeds!r}: use e.g. 1-100 or 1,2,3")
    try:
        beta = parse_beta(args.beta)
    except ValueError:
        ap.error(f"--beta {args.beta!r}: use a positive number, or null to disable early stopping")
    if not 0.0 <= args.eta <= 1.0:
        ap.error(f"--eta {args.eta}: use a number in [0, 1]")
    if not seeds:
        ap.error("--seeds is empty")
    try:
        concurrency = [int(n) for n in args.concurrency.split(",") if n]
    except ValueError:
        concurrency = []
    if not concurrency or min(concurrency) < 1:
        ap.error(f"--concurrency {args.concurrency!r}: use whole numbers >= 1, e.g. 2 or 1,2,4")
    args.concurrency = list(dict.fromkeys(concurrency))
    try:
        args.noise = None if args.noise is None else Noise.parse(args.noise)
    except ValueError as exc:
        ap.error(f"--noise: {exc}")
    try:
        args.life = None if args.life is None else Life.parse(args.life)
    except ValueError as exc:
        ap.error(f"--life: {exc}")
    try:
        args.horizons = parse_horizons(args.horizon)
    except ValueError:
        ap.error(f"--horizon {args.horizon!r}: use whole numbers >= 1 or paper, e.g. 24 or paper,24,10")
    args.horizon = args.horizons[0] if len(args.horizons) == 1 else None
    gpus = [g for g in args.gpus.split(",") if g]
    if args.warm_from is not None and len(gpus) < 2:
        ap.error(f"--warm-from {args.warm_from}: give two or more GPUs in --gpus (each row starts from the next one)")
    if args.judge_on is not None and args.judge_on not in gpus:
        ap.error(f"--judge-on {args.judge_on}: name one of --gpus ({', '.join(gpus)})")
    if args.warm_from is not None and args.revision is not None and args.revision < WARM_REVISION:
        ap.error(
            f"--warm-from needs {DEFAULT_POLICY} revision {WARM_REVISION} or later, not --revision {args.revision}"
        )
    if (args.noise is not None or args.life is not None) and args.max_early_stops is None:
        args.max_early_stops = 3  # a real run's default: the paper's semantics run out of tries under noise
    unknown = [p for p in args.policies.split(",") if p and p not in POLICIES]
    if unknown:
        ap.error(f"--policies: unknown {', '.join(unknown)}; known: {', '.join(POLICIES)}")
    if args.objective is not None:
        try:
            objectives = [parse_objective(o) for o in args.objective.split(",") if o]
        except ObjectiveError as exc:
            ap.error(str(exc))
        if not objectives:
            ap.error("--objective names no objective; use e.g. max-slowdown=1.1")
        if len(args.horizons) > 1:
            ap.error("--objective takes one --horizon")
        return run_objectives(args, seeds, beta, objectives)
    try:
        return run(args, seeds, beta)
    except ZeusRunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def parse_horizons(text: str | None) -> list[int | None]:
    """``paper,24,10`` -> [None, 24, 10] (None: the paper's horizon); None -> [None]."""
    if text is None:
        return [None]
    out: list[int | None] = []
    for part in text.split(","):
        if part.strip() == "paper":
            out.append(None)
        elif part.strip():
            n = int(part)
            if n < 1:
                raise ValueError(part)
            out.append(n)
    if not out:
        raise ValueError(text)
    return list(dict.fromkeys(out))


def load_tables(args: argparse.Namespace) -> list[JobTable] | None:
    """The (job, gpu) rows of ``--jobs`` x ``--gpus`` (None: an unknown job, reported)."""
    gpus = [g for g in args.gpus.split(",") if g]
    known = trace_jobs(args.traces)
    jobs = [j for j in args.jobs.split(",") if j] if args.jobs else list(known)
    unknown = [j for j in jobs if j not in known]
    if unknown:
        print(f"error: unknown job(s) {', '.join(unknown)}; known: {', '.join(known)}", file=sys.stderr)
        return None
    tables: list[JobTable] = []
    for gpu in gpus:
        traces = load_traces(args.traces / "summary_train.csv", args.traces / f"summary_power_{gpu}.csv")
        for job in jobs:
            try:
                tables.append(job_table(traces, known[job]))
            except TraceError as exc:
                print(f"skipping {job} on {gpu}: {exc}", file=sys.stderr)
    return tables


def run_objectives(args: argparse.Namespace, seeds: list[int], beta: float | None, objectives: list[Objective]) -> int:
    """Per row and objective: median energy saving and slowdown against Default, over seeds."""
    tables = load_tables(args)
    if tables is None:
        return 2
    policy = [p for p in args.policies.split(",") if p][-1]
    tasks = [(t, policy, o, beta, seeds) for o in objectives for t in tables]
    try:
        if args.workers > 1 and len(tasks) > 1:
            with ProcessPoolExecutor(max_workers=min(args.workers, len(tasks))) as pool:
                cells = list(pool.map(simulate_objective_cell, tasks))
        else:
            cells = [simulate_objective_cell(t) for t in tasks]
    except ZeusRunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        for task, (saving, slowdown) in zip(tasks, cells, strict=True):
            t, _, o, _, _ = task
            print(
                json.dumps(
                    {"workload": t.job.name, "gpu": t.gpu, "objective": o.label, "policy": policy}
                    | {"energy_saving": saving, "slowdown": slowdown}
                )
            )
        return 0
    print(f"policy {policy}, beta {'null' if beta is None else beta}, seeds {args.seeds} ({len(seeds)})")
    print("energy saving vs Default (1 - energy/Default) / slowdown (time/Default), medians over seeds\n")
    print(f"{'job':<14}{'gpu':<6}" + "".join(f"{o.label:>22}" for o in objectives))
    by_row = {(t.job.name, t.gpu): {} for t in tables}
    for (t, _, o, _, _), cell in zip(tasks, cells, strict=True):
        by_row[t.job.name, t.gpu][o.label] = cell
    for (job, gpu), row in by_row.items():
        print(f"{job:<14}{gpu:<6}" + "".join(_cell(s, d) for s, d in row.values()))
    medians = [
        (
            statistics.median(r[o.label][0] for r in by_row.values()),
            statistics.median(r[o.label][1] for r in by_row.values()),
        )
        for o in objectives
    ]
    print(f"{'median':<20}" + "".join(_cell(s, d) for s, d in medians))
    return 0


def _cell(saving: float, slowdown: float) -> str:
    return f"{f'{saving * 100:.1f}% / {slowdown:.3f}x':>22}"


def simulate_objective_cell(task: tuple) -> tuple[float, float]:
    """Median energy saving and slowdown vs Default of one (row, objective) over seeds (runs in workers)."""
    table, policy, objective, beta, seeds = task
    settings = OptimizerSettings.for_policy(policy)
    savings, slowdowns = [], []
    for seed in seeds:
        try:
            r = simulate(table, beta=beta, seed=seed, settings=settings, baselines=False, objective=objective)
        except ZeusRunError as exc:
            raise ZeusRunError(f"{table.job.name} on {table.gpu}, {objective.label}, seed {seed}: {exc}") from None
        savings.append(1.0 - r.energy / (r.horizon * r.default.energy))
        slowdowns.append(r.time / (r.horizon * r.default.time))
    return statistics.median(savings), statistics.median(slowdowns)


def run(args: argparse.Namespace, seeds: list[int], beta: float | None) -> int:
    policies = [p for p in args.policies.split(",") if p]
    tables = load_tables(args)
    if tables is None:
        return 2
    judged = [t for t in tables if args.judge_on is None or t.gpu == args.judge_on]
    # The reference was measured at eta 0.5, beta 2, the paper's horizon, without noise.
    quiet = args.noise is None and args.life is None and (args.eta, beta) == REFERENCE_KNOBS
    reference = load_reference(args.traces / REFERENCE_FILE) if quiet else {}
    baseline = load_baseline(args.baseline) if args.baseline is not None else None
    results: dict[tuple[int, str, int | None], list[Row]] = {}
    walls: dict[tuple[int, str], float] = {}
    for n in args.concurrency:
        for policy in policies:
            tasks = [
                (
                    t,
                    policy,
                    args.eta,
                    beta,
                    seeds,
                    args.json or args.json_out is not None or baseline is not None,
                    args.max_early_stops,
                    n,
                    args.noise,
                    tuple(args.horizons),
                    args.revision,
                    warm_source(tables, t) if args.warm_from and policy == DEFAULT_POLICY else None,
                    args.life,
                    args.control,
                )
                for t in judged
            ]
            start = time.perf_counter()
            if args.workers > 1 and len(tasks) > 1:
                with ProcessPoolExecutor(max_workers=min(args.workers, len(tasks))) as pool:
                    by_task = list(pool.map(simulate_row, tasks))
            else:
                by_task = [simulate_row(t) for t in tasks]
            walls[n, policy] = time.perf_counter() - start
            for i, h in enumerate(args.horizons):
                results[n, policy, h] = [rows[i] for rows in by_task]
    records = [summary for rows in results.values() for row in rows for summary in row.summaries]
    if args.json_out is not None:
        args.json_out.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    if args.json:
        for record in records:
            print(json.dumps(record))
        return 0
    fallback = "" if args.max_early_stops is None else f", max_early_stops {args.max_early_stops}"
    overlap = "" if args.concurrency == [1] else f", concurrency {','.join(map(str, args.concurrency))}"
    noise = "" if args.noise is None else f", noise {args.noise.describe()}"
    noise += "" if args.life is None else f", life {args.life.describe()}"
    noise += "" if args.control is None else f", control {args.control:g}"
    extra = "" if args.revision is None else f", zeus-voi revision {args.revision}"
    extra += "" if args.warm_from is None else f", {DEFAULT_POLICY} warm from the next GPU's run (paper horizon)"
    extra += "" if args.judge_on is None else f", judged on {args.judge_on} alone"
    for h in args.horizons:
        horizon = "" if h is None else f", horizon {h}"
        print(
            f"eta {args.eta}, beta {'null' if beta is None else beta}{fallback}{overlap}{noise}{horizon}{extra}, "
            f"seeds {args.seeds} ({len(seeds)})\n"
        )
        for n in args.concurrency:
            if args.concurrency != [1]:
                print(f"== {n} recurrence(s) in flight ==\n")
            for policy in policies:
                zeus = results.get((n, "zeus", h)) if policy != "zeus" else None
                print_table(policy, results[n, policy, h], walls[n, policy], reference if h is None else {}, zeus)
                if baseline is not None:
                    print_baseline(results[n, policy, h], baseline, args.baseline)
        if len(args.concurrency) > 1:
            print_overlap(policies, args.concurrency, {(n, p): r for (n, p, hh), r in results.items() if hh == h})
    return 0


def simulate_row(task: tuple) -> list[Row]:
    """Simulate one (job, gpu) row for every seed at each horizon (a top-level function: it runs in worker processes).

    A warm start is drawn once per seed and serves every horizon.
    """
    (
        table,
        policy,
        eta,
        beta,
        seeds,
        keep,
        max_early_stops,
        concurrency,
        noise,
        horizons,
        revision,
        source,
        life,
        control,
    ) = task
    if life is not None:  # a life's failed nights are expected: not one warning each
        logging.getLogger("zeus_run.engine").setLevel(logging.ERROR)
    settings = OptimizerSettings.for_policy(policy, **({} if revision is None else {"revision": revision}))
    per: list[dict] = [
        {
            "regrets": [],
            "ratios": [],
            "summaries": [],
            "tries": [],
            "saved_ci": [],
            "saved_energy_ci": [],
            "saved_time_ci": [],
        }
        for _ in horizons
    ]
    default_vs_oracle = math.nan
    for seed in seeds:
        warm = None
        if source is not None:  # the same policy's run of the same job and seed on the source GPU
            ran = simulate(
                source,
                eta=eta,
                beta=beta,
                seed=seed,
                settings=settings,
                baselines=False,
                max_early_stops=max_early_stops,
            )
            warm = warm_start(ran.records, f"{source.job.name} on {source.gpu}, seed {seed}")
        for horizon, out in zip(horizons, per, strict=True):
            try:
                r = simulate(
                    table,
                    eta=eta,
                    beta=beta,
                    seed=seed,
                    settings=settings,
                    baselines=False,
                    max_early_stops=max_early_stops,
                    concurrency=concurrency,
                    noise=noise,
                    horizon=horizon,
                    warm=warm,
                    life=life,
                    control=control,
                )
            except ZeusRunError as exc:
                raise ZeusRunError(f"{table.job.name} on {table.gpu}, {policy}, seed {seed}: {exc}") from None
            out["regrets"].append(r.regret)
            out["ratios"].append(r.cost / r.default_cost)
            default_vs_oracle = r.default.cost / r.oracle.cost
            out["tries"].extend(r.tries)
            saved = r.saved()
            cost, energy, spent_time = saved["cost"], saved["energy"], saved["time"]
            out["saved_ci"].append((1.0 - r.cost / r.default_cost, cost.ci if cost is not None else None))
            out["saved_energy_ci"].append(
                (1.0 - r.energy / r.default_energy, energy.ci if energy is not None else None)
            )
            out["saved_time_ci"].append(
                (1.0 - r.time / r.default_time, spent_time.ci if spent_time is not None else None)
            )
            if keep:
                summary = r.to_json() | {"revision": settings.revision}
                summary |= {"concurrency": concurrency} if concurrency > 1 else {}
                if warm is not None:
                    summary |= {"warm_from": warm.source, "warm": warm.fingerprint}
                out["summaries"].append(summary)
    rows = []
    for horizon, out in zip(horizons, per, strict=True):
        n = table.horizon if horizon is None else horizon
        oracle = n * oracle_baseline(table, eta).cost
        rows.append(
            Row(
                table.job.name,
                table.gpu,
                n,
                tuple(out["regrets"]),
                tuple(out["ratios"]),
                tuple(out["summaries"]),
                tuple(out["tries"]),
                default_vs_oracle,
                informed_start(table, eta, n) / oracle - 1.0,
                guided_walk(table, eta, n, beta) / oracle - 1.0,
                tuple(out["saved_ci"]),
                tuple(out["saved_energy_ci"]),
                tuple(out["saved_time_ci"]),
            )
        )
    return rows


def warm_source(tables: list[JobTable], table: JobTable) -> JobTable:
    """The same job on the next GPU of ``--gpus``, cyclically (with two GPUs: the other one)."""
    same = [t for t in tables if t.job.name == table.job.name]
    if len(same) < 2:
        raise ZeusRunError(f"--warm-from other-gpu: {table.job.name} has no row on another GPU to start from")
    return same[(same.index(table) + 1) % len(same)]


def load_baseline(path: Path) -> dict[tuple[str, str, int], dict[int, float]]:
    """A ``--json-out`` file -> ``(job, gpu, horizon) -> {seed: regret}``."""
    out: dict[tuple[str, str, int], dict[int, float]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ZeusRunError(f"--baseline {str(path)!r}: {exc.strerror or exc}; pass a --json-out file") from None
    for line in lines:
        if line.strip():
            d = json.loads(line)
            out.setdefault((d["workload"], d["gpu"], d["horizon"]), {})[d["seed"]] = d["regret"]
    return out


def print_baseline(rows: list[Row], baseline: dict[tuple[str, str, int], dict[int, float]], path: Path) -> None:
    """Rows worse and better than ``--baseline``'s (95% paired bootstrap interval of the difference of medians)."""
    worse, better, missing, medians = [], [], 0, []
    for r in rows:
        seeds = [s["seed"] for s in r.summaries]
        base = baseline.get((r.job, r.gpu, r.horizon), {})
        if not seeds or any(s not in base for s in seeds):
            missing += 1
            continue
        b = tuple(base[s] for s in seeds)
        medians.append(statistics.median(b))
        lo, hi = paired_interval(r.regrets, b)
        label = f"{r.job} {r.gpu} ({lo * 100:+.2f} to {hi * 100:+.2f} points)"
        if lo > 0:
            worse.append(label)
        elif hi < 0:
            better.append(label)
    print(f"against {path.name} (median over its rows {statistics.median(medians) * 100:.2f}%)" if medians else "")
    print(f"  rows worse (paired 95% interval above 0): {', '.join(worse) or 'none'}")
    print(f"  rows better (paired 95% interval below 0): {', '.join(better) or 'none'}")
    if missing:
        print(f"  rows without the same seeds in {path.name}: {missing}")
    print()


def paired_interval(a: tuple[float, ...], b: tuple[float, ...], seed: int = 0) -> tuple[float, float]:
    """The 95% interval of ``median(a) - median(b)`` under a paired bootstrap over seeds.

    ``a`` and ``b`` are two policies' regrets on the same seeds, in seed order; each of `BOOTSTRAP`
    resamples draws seed indices with replacement and takes both policies' runs of those seeds.
    """
    x, y = np.asarray(a), np.asarray(b)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(BOOTSTRAP, len(x)))
    diffs = np.median(x[idx], axis=1) - np.median(y[idx], axis=1)
    lo, hi = np.quantile(diffs, [BOOTSTRAP_TAIL, 1.0 - BOOTSTRAP_TAIL])
    return float(lo), float(hi)


def print_overlap(policies: list[str], concurrency: list[int], results: dict[tuple[int, str], list[Row]]) -> None:
    """Each policy's median regret over rows (each row: the median over seeds) by recurrences in flight."""
    rows = next(iter(results.values()))
    print(
        f"What overlap costs: median regret over {len(rows)} rows (each the median over seeds) by recurrences in flight"
    )
    print(
        f"{'policy':<12}"
        + "".join(f"{f'N={n}':>9}" for n in concurrency)
        + f"{'worst row at N=' + str(concurrency[-1]):>28}"
    )
    for policy in policies:
        line = f"{policy:<12}"
        for n in concurrency:
            line += f"{statistics.median(r.median for r in results[n, policy]) * 100:>8.2f}%"
        worst = max(results[concurrency[-1], policy], key=lambda r: r.median)
        line += f"{f'{worst.median * 100:.2f}% ({worst.job} {worst.gpu})':>28}"
        print(line)
    print()


def load_reference(path: Path) -> dict[tuple[str, str], float]:
    """``(job, gpu) -> median regret`` of the Zeus reference (fraction), if the file exists."""
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            out[d["workload"], d["gpu"]] = d["median_regret"] / 100.0
    return out


def print_table(
    policy: str, rows: list[Row], wall: float, reference: dict[tuple[str, str], float], zeus: list[Row] | None
) -> None:
    zeus_rows = {(r.job, r.gpu): r for r in zeus or ()}
    print(f"policy {policy}")
    head = f"{'job':<14}{'gpu':<6}{'horizon':>8}{'cost/Default':>14}{'median':>9}{'p90':>8}"
    head += f"{'mean':>9}{'>1.1xD':>8}{'Default':>9}{'floor':>8}{'walk':>8}"
    head += f"{'reference':>11}" if reference else ""
    head += f"{'zeus':>8}" if zeus_rows else ""
    head += f"{'tries':>7}{'max':>5}{'>1 try':>8}"
    print(head)
    worse_ref, worse_zeus, above_default = [], [], []
    for r in rows:
        line = (
            f"{r.job:<14}{r.gpu:<6}{r.horizon:>8}{statistics.median(r.cost_ratios):>14.3f}"
            f"{r.median * 100:>8.2f}%{r.p90 * 100:>7.2f}%"
            f"{r.mean * 100:>8.2f}%{r.over_default * 100:>7.1f}%{r.default_regret * 100:>8.2f}%{r.floor * 100:>7.2f}%"
            f"{r.walk * 100:>7.2f}%"
        )
        ref = reference.get((r.job, r.gpu))
        if reference:
            line += f"{ref * 100:>10.2f}%" if ref is not None else f"{'-':>11}"
            if ref is not None and r.median > ref:
                worse_ref.append(f"{r.job} {r.gpu}")
        z = zeus_rows.get((r.job, r.gpu))
        if zeus_rows:
            line += f"{z.median * 100:>7.2f}%" if z is not None else f"{'-':>8}"
            if z is not None and len(z.regrets) == len(r.regrets):
                lo, hi = paired_interval(r.regrets, z.regrets)
                if lo > 0:
                    worse_zeus.append(f"{r.job} {r.gpu} (+{lo * 100:.2f} to +{hi * 100:.2f} points)")
        line += f"{r.mean_tries:>7.3f}{max(r.tries, default=0):>5}{r.retried * 100:>7.2f}%"
        print(line)
        if r.median > r.default_regret + 0.01:
            above_default.append(f"{r.job} {r.gpu} ({r.median * 100:.2f}% vs {r.default_regret * 100:.2f}%)")
    if rows:
        worst = max(rows, key=lambda r: r.median)
        print(
            f"median regret over {len(rows)} rows: {statistics.median(r.median for r in rows) * 100:.2f}%; "
            f"worst row: {worst.median * 100:.2f}% ({worst.job} {worst.gpu})"
        )
        regrets = [x for r in rows for x in r.regrets]
        ratios = [x for r in rows for x in r.cost_ratios]
        print(
            f"all {len(regrets)} runs: mean regret {statistics.fmean(regrets) * 100:.2f}%, "
            f"p90 {float(np.percentile(regrets, 90)) * 100:.2f}%, "
            f"cost above {OVER_DEFAULT}x the Default: {sum(c > OVER_DEFAULT for c in ratios) / len(ratios) * 100:.2f}%"
        )
        print(f"rows whose median is more than 1 point above the Default's: {', '.join(above_default) or 'none'}")
        print(
            f"floor (b0 once, then the Oracle's batch size, each first run profiling the limits): "
            f"median over rows {statistics.median(r.floor for r in rows) * 100:.2f}%"
        )
        print(
            f"walk (b0, then one batch size a recurrence to the Oracle's and the one beyond it): "
            f"median over rows {statistics.median(r.walk for r in rows) * 100:.2f}%"
        )
        tries = [t for r in rows for t in r.tries]
        print(
            f"tries per recurrence: mean {statistics.fmean(tries):.3f}, max {max(tries)}; "
            f"recurrences with more than one try: {sum(t > 1 for t in tries) / len(tries) * 100:.2f}%"
        )
    if reference:
        print(f"rows worse than the reference: {', '.join(worse_ref) or 'none'}")
    if zeus_rows:
        print(
            "rows worse than zeus (95% paired bootstrap interval of the difference of medians above 0): "
            f"{', '.join(worse_zeus) or 'none'}"
        )
    print(calibrate(x for r in rows for x in r.saved_ci).line())
    print(calibrate(x for r in rows for x in r.saved_energy_ci).line("energy"))
    print(calibrate(x for r in rows for x in r.saved_time_ci).line("time"))
    print(f"wall time: {wall:.2f} s ({sum(len(r.regrets) for r in rows)} simulations)")
    print()


if __name__ == "__main__":
    sys.exit(main())
