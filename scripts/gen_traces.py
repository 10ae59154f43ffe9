#!/usr/bin/env python3
"""Generate synthetic traces in the shared traces' format, from laws drawn wider than the paper's six jobs.

Writes into ``--out DIR``: ``summary_train.csv`` (epochs each run needed to reach the target),
``summary_power_<gpu>.csv`` per GPU (time and average power of one epoch at each power limit),
``jobs.csv`` (each job's dataset, network, optimizer, target metric, ``max_epochs`` and default batch
size, plus the law it was drawn from) and ``README.md`` (the seed and the laws). ``bench_optimizer.py
--traces DIR --gpus G1,G2,...`` then simulates every job of ``jobs.csv`` on those GPUs.

What is the job's and what is the GPU's follows how training works: the epochs a batch size needs to
reach the target are the job's (the same on every GPU), the time and power of an epoch are the GPU's
(with the job's own compute scale). The laws, each parameter drawn per job or per GPU:

Epochs of batch size b (the job's; McCandlish et al. 2018, "An empirical model of large-batch
training": examples to a target grow as 1 + b / B_noise, and small batch sizes at a fixed learning
rate pay a penalty that falls as b grows)::

    epochs(b) = e_min * shape(b) / min(shape),  shape(b) = (1 + b / b_noise) * (1 + (b_small / b) ** p)

  e_min (the fewest epochs over the grid) log-uniform in [1.5, 40]; b_noise log-uniform in [grid min / 4, grid max * 16] (epochs rise
  with b where b_noise is inside the grid, are flat where it is far above it); the small-batch penalty
  (probability 0.6) with b_small log-uniform in [grid min / 2, grid max / 2] and p uniform in [0.5, 2]
  (epochs fall as b grows, or fall then rise); with probability 0.3 the one or two smallest batch sizes
  never converge; with probability 0.2 the largest diverges in each run with probability 0.2-0.6;
  ``max_epochs`` is 1.5-4 x the default's epochs (at least 3), so a batch size that needs more never
  converges. Each run's epochs: the law times a log-normal spread (sigma uniform in [0.02, 0.3]),
  rounded, at least 1; 4, 5 or 10 runs per batch size.

Time of an epoch at batch size b on a GPU at its top limit (the pace saturates as the GPU fills)::

    time(b) = t_sat * (1 + b_half / b) * (1 + gamma * max(0, log2(b / b_knee)) ** 2)

  t_sat = the job's work (log-uniform 5-5,000 s) / the GPU's speed (log-uniform 0.5-2); b_half = the
  job's scale (log-uniform in [grid min / 2, grid max * 2]) x the GPU's saturation factor
  (log-uniform 0.25-4: GPUs that saturate early or late) x a per-pair jitter (log-normal, sigma 0.3);
  with probability 0.4 per pair a large-batch slowdown past b_knee (a grid size in the upper half;
  gamma uniform in [0.05, 0.3]); with probability 0.3 per pair the GPU runs out of memory above a
  batch size in the upper half (those batch sizes have no power rows, as in the shared traces).

Power at batch size b and power limit pl: demand = idle + (peak - idle) x b / (b + b_half) (idle
0.15-0.35 x the GPU's top limit, peak 0.6-1.0 x it); under a limit below the demand, the epoch's time
grows by (demand / pl) ** alpha (alpha uniform in [0.6, 1.6] per GPU) and the power is 0.93-1.0 x pl.
Power limits: 4-7 evenly spaced from 0.35-0.5 x the top limit (200-700 W) to it. Every time and
power carries a 2% measurement jitter.

Default batch size: a grid size whose every run converges and that needs at most 6 x the fewest
epochs (cifar100's b0 needs 4.7 x), with probability 0.25 the one that is
cheapest at eta 0.5 on the first GPU (the default is already the best), else drawn uniformly.

Wider laws (``--laws wide``; the default ``--laws paper`` draws the set above, seed 0's byte for byte). Each job's
epochs follow one of three laws, drawn with equal chance: the law above; a learning rate scaled with the batch
size up to a critical batch size b_crit (log-uniform over the grid), epochs flat below it and rising as
(b / b_crit) ** q above it (q uniform in [0.3, 1]); or a learning rate tuned for one batch size b_lr (log-uniform
over the grid) and kept for the others, epochs falling as (b_lr / b) ** p towards it from below (p uniform in
[0.2, 1], the one or two smallest never converging with probability 0.3) and rising as (b / b_lr) ** q above it.
An epoch also pays a per-step overhead (data loading, launches, a host sync) at idle power: overhead / b of the
time per epoch (overhead log-uniform in [grid min / 4, grid max], times the GPU's speed), so small batch sizes are
bound by it and draw little power. Memory grows with the batch size: each (job, GPU) pair runs out of memory above
b_oom = the job's memory scale x the GPU's memory (with probability 0.5 inside the grid, never at or below the
default). The default is the cheapest on the first GPU with probability 0.25, an end of the grid (either, far
from the best) with probability 0.25, else drawn uniformly.

Example:

    python scripts/gen_traces.py --out /tmp/gen                       # 26 jobs x 4 GPUs, seed 0
    python scripts/gen_traces.py --out /tmp/gen-wide --laws wide --seed 1   # the wider laws
    python scripts/bench_optimizer.py --traces /tmp/gen --gpus g1,g2,g3,g4 --policies zeus-voi
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Column orders of the shared traces.
TRAIN_HEADER = (
    "dataset",
    "network",
    "batch_size",
    "optimizer",
    "learning_rate",
    "run",
    "target_metric",
    "target_epoch",
)
POWER_HEADER = ("dataset", "network", "batch_size", "optimizer", "power_limit", "time_per_epoch", "average_power")
JOBS_HEADER = (
    "name",
    "dataset",
    "network",
    "optimizer",
    "target_metric",
    "max_epochs",
    "default_batch_size",
    "law",
)
TARGET = 1.0
#: Measurement jitter of every time and power.
JITTER = 0.02


@dataclass(frozen=True)
class Job:
    name: str
    grid: tuple[int, ...]
    epochs: dict[int, tuple[float, ...]]  # per batch size, each run's target epoch (NaN: never)
    max_epochs: int
    default: int
    work: float  # seconds of an epoch at saturation on a speed-1 GPU
    scale: float  # the job's b_half on a saturation-1 GPU
    law: str
    overhead: float = 0.0  # --laws wide: the per-step overhead's batch size (time per epoch grows by overhead / b)
    memory: float = math.inf  # --laws wide: the job's memory scale (b_oom on a memory-1 GPU)


@dataclass(frozen=True)
class Gpu:
    name: str
    limits: tuple[float, ...]
    speed: float
    saturation: float
    alpha: float
    idle: float
    peak: float
    memory: float = 1.0  # --laws wide: the GPU's memory, relative


def loguniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def draw_grid(rng: np.random.Generator) -> tuple[int, ...]:
    start = 2 ** int(rng.integers(1, 7))
    k = int(rng.integers(4, 9))
    if rng.random() < 0.8:
        return tuple(start * 2**i for i in range(k))
    # half-octave steps, as in squad's 8, 12, 16, 24, ...
    out = [start]
    while len(out) < k:
        out.append(out[-1] * 3 // 2 if len(out) % 2 else out[-2] * 2)
    return tuple(sorted(set(out)))


def draw_gpu(rng: np.random.Generator, name: str) -> Gpu:
    top = float(rng.choice([200, 250, 300, 350, 400, 450, 500, 700]))
    low = top * rng.uniform(0.35, 0.5)
    n = int(rng.integers(4, 8))
    limits = tuple(float(round(x)) for x in np.linspace(low, top, n))
    return Gpu(
        name,
        limits,
        speed=loguniform(rng, 0.5, 2.0),
        saturation=loguniform(rng, 0.25, 4.0),
        alpha=float(rng.uniform(0.6, 1.6)),
        idle=top * rng.uniform(0.15, 0.35),
        peak=top * rng.uniform(0.6, 1.0),
    )


def draw_epochs(rng: np.random.Generator, grid: tuple[int, ...]) -> tuple[dict[int, float], list[str], set[int]]:
    """Expected epochs per batch size (the law), its description, and batch sizes that never converge."""
    lo, hi = grid[0], grid[-1]
    e_min = loguniform(rng, 1.5, 40.0)
    b_noise = loguniform(rng, lo / 4, hi * 16)
    law = [f"e_min {e_min:.3g}", f"b_noise {b_noise:.4g}"]
    small, p = 0.0, 1.0
    if rng.random() < 0.6:
        small, p = loguniform(rng, lo / 2, hi / 2), float(rng.uniform(0.5, 2.0))
        law.append(f"b_small {small:.4g} p {p:.2f}")
    never: set[int] = set()
    if rng.random() < 0.3:
        never = set(grid[: int(rng.integers(1, 3))])
        law.append(f"never {sorted(never)}")
    shape = {b: (1 + b / b_noise) * (1 + (small / b) ** p if small else 1.0) for b in grid}
    least = min(shape.values())
    return {b: e_min * s / least for b, s in shape.items()}, law, never


def draw_job(rng: np.random.Generator, index: int, first_gpu: Gpu) -> Job:
    grid = draw_grid(rng)
    mean, law, never = draw_epochs(rng, grid)
    sigma = float(rng.uniform(0.02, 0.3))
    runs = int(rng.choice([4, 5, 10]))
    diverge = grid[-1] if rng.random() < 0.2 else None
    p_div = float(rng.uniform(0.2, 0.6))
    epochs: dict[int, tuple[float, ...]] = {}
    for b in grid:
        row = []
        for _ in range(runs):
            if b in never or (b == diverge and rng.random() < p_div):
                row.append(math.nan)
            else:
                row.append(float(max(1, round(mean[b] * math.exp(rng.normal(0.0, sigma))))))
        epochs[b] = tuple(row)
    law.append(f"sigma {sigma:.2f}")
    if diverge is not None:
        law.append(f"diverges at {diverge} (p {p_div:.2f})")
    work, scale = loguniform(rng, 5.0, 5000.0), loguniform(rng, grid[0] / 2, grid[-1] * 2)
    # max_epochs from the default's epochs: choose the default among sizes that converge in every run
    least = min(mean.values())
    ok = [b for b in grid if all(not math.isnan(e) for e in epochs[b]) and mean[b] <= 6 * least]
    pick = ok[int(rng.integers(len(ok)))] if ok else grid[-1]
    max_epochs = max(3, math.ceil(mean[pick] * rng.uniform(1.5, 4.0)))
    fits = [b for b in ok if max(epochs[b]) <= max_epochs]
    default = pick if pick in fits else (fits[0] if fits else pick)
    if fits and rng.random() < 0.25:  # the default is already the best (on the first GPU, at eta 0.5)
        t = {b: work / first_gpu.speed * (1 + scale * first_gpu.saturation / b) for b in fits}
        pw = {
            b: first_gpu.idle + (first_gpu.peak - first_gpu.idle) * b / (b + scale * first_gpu.saturation) for b in fits
        }
        top = first_gpu.limits[-1]
        default = min(fits, key=lambda b: float(np.mean(epochs[b])) * t[b] * (0.5 * pw[b] + 0.5 * top))
        law.append("default best")
    return Job(f"gen{index:02d}", grid, epochs, max_epochs, default, work, scale, "; ".join(law))


def draw_epochs_wide(rng: np.random.Generator, grid: tuple[int, ...]) -> tuple[dict[int, float], list[str], set[int]]:
    """``--laws wide``: epochs from the paper's law, a critical batch size, or a learning rate tuned for one size."""
    kind = int(rng.integers(3))
    if kind == 0:
        return draw_epochs(rng, grid)
    lo, hi = grid[0], grid[-1]
    e_min = loguniform(rng, 1.5, 40.0)
    never: set[int] = set()
    if kind == 1:
        crit, q = loguniform(rng, lo, hi), float(rng.uniform(0.3, 1.0))
        mean = {b: e_min * max(1.0, b / crit) ** q for b in grid}
        law = [f"e_min {e_min:.3g}", f"critical batch {crit:.4g} q {q:.2f}"]
    else:
        tuned, p, q = loguniform(rng, lo, hi), float(rng.uniform(0.2, 1.0)), float(rng.uniform(0.3, 1.0))
        mean = {b: e_min * ((tuned / b) ** p if b < tuned else (b / tuned) ** q) for b in grid}
        law = [f"e_min {e_min:.3g}", f"learning rate tuned for {tuned:.4g} p {p:.2f} q {q:.2f}"]
        if rng.random() < 0.3 and grid[0] < tuned:
            never = set(grid[: int(rng.integers(1, 3))])
            law.append(f"never {sorted(never)}")
    return mean, law, never


def pick_default_wide(rng: np.random.Generator, job: Job, fits: list[int], first_gpu: Gpu) -> tuple[int, str]:
    """``--laws wide``: the cheapest on the first GPU (0.25), an end of the grid far from it (0.25), else uniform."""
    u = rng.random()
    t = {b: top_time(job, first_gpu, b, job.scale * first_gpu.saturation)[0] for b in fits}
    cost = {b: float(np.nanmean(job.epochs[b])) * t[b] for b in fits}
    best = min(fits, key=lambda b: cost[b])
    if u < 0.25:
        return best, "default best"
    if u < 0.5:
        far = max((fits[0], fits[-1]), key=lambda b: abs(math.log(b / best)))
        return far, "default far"
    return fits[int(rng.integers(len(fits)))], ""


def draw_job_wide(rng: np.random.Generator, index: int, first_gpu: Gpu) -> Job:
    """``--laws wide``: a job drawn from `draw_epochs_wide`, with a per-step overhead and a memory scale."""
    grid = draw_grid(rng)
    mean, law, never = draw_epochs_wide(rng, grid)
    sigma = float(rng.uniform(0.02, 0.3))
    runs = int(rng.choice([4, 5, 10]))
    epochs = {
        b: tuple(
            math.nan if b in never else float(max(1, round(mean[b] * math.exp(rng.normal(0.0, sigma)))))
            for _ in range(runs)
        )
        for b in grid
    }
    law.append(f"sigma {sigma:.2f}")
    work, scale = loguniform(rng, 5.0, 5000.0), loguniform(rng, grid[0] / 2, grid[-1] * 2)
    overhead = loguniform(rng, grid[0] / 4, grid[-1])
    memory = loguniform(rng, grid[0], grid[-1]) if rng.random() < 0.5 else math.inf
    least = min(mean.values())
    ok = [b for b in grid if b not in never and mean[b] <= 6 * least] or [b for b in grid if b not in never]
    pick = ok[int(rng.integers(len(ok)))]
    max_epochs = max(3, math.ceil(max(mean[b] for b in ok) * rng.uniform(1.2, 2.0)))
    fits = [b for b in ok if max(epochs[b]) <= max_epochs] or [pick]
    job = Job(f"gen{index:02d}", grid, epochs, max_epochs, pick, work, scale, "", overhead, memory)
    default, why = pick_default_wide(rng, job, fits, first_gpu)
    law += [f"overhead {overhead:.4g}", f"memory {memory:.4g}"] + ([why] if why else [])
    return Job(job.name, grid, epochs, max_epochs, default, work, scale, "; ".join(law), overhead, memory)


def top_time(job: Job, gpu: Gpu, b: int, half: float) -> tuple[float, float]:
    """``--laws wide``: time of an epoch at the GPU's top limit, and the share of it the GPU computes (the rest is
    the per-step overhead, at idle power)."""
    compute = job.work / gpu.speed * (1 + half / b)
    step = job.work / gpu.speed * job.overhead / b
    return compute + step, compute / (compute + step)


def power_rows(rng: np.random.Generator, job: Job, gpu: Gpu) -> list[tuple]:
    """The power trace rows of ``job`` on ``gpu``: one per (batch size, limit) it does not run out of memory at."""
    half = job.scale * gpu.saturation * math.exp(rng.normal(0.0, 0.3))
    upper = job.grid[len(job.grid) // 2 :]
    knee = upper[int(rng.integers(len(upper)))] if rng.random() < 0.4 else None
    gamma = float(rng.uniform(0.05, 0.3))
    oom = upper[int(rng.integers(len(upper)))] if rng.random() < 0.3 else None
    wide = job.overhead > 0.0
    rows = []
    for b in job.grid:
        if oom is not None and b > oom and b > job.default:
            continue
        if wide and b > job.memory * gpu.memory and b > job.default:
            continue  # --laws wide: memory grows with the batch size
        t_top = job.work / gpu.speed * (1 + half / b)
        busy = 1.0
        if wide:
            t_top, busy = top_time(job, gpu, b, half)
        if knee is not None and b > knee:
            t_top *= 1 + gamma * math.log2(b / knee) ** 2
        demand = gpu.idle + (gpu.peak - gpu.idle) * b / (b + half) * busy
        for pl in gpu.limits:
            if demand > pl:
                t, p = t_top * (demand / pl) ** gpu.alpha, pl * rng.uniform(0.93, 1.0)
            else:
                t, p = t_top, demand
            t *= math.exp(rng.normal(0.0, JITTER))
            p *= math.exp(rng.normal(0.0, JITTER))
            rows.append((job.name, "net", b, "sgd", pl, t, p))
    return rows


def generate(out: Path, n_jobs: int, n_gpus: int, seed: int, laws: str = "paper") -> tuple[list[Job], list[Gpu]]:
    rng = np.random.default_rng(seed)
    gpus = [draw_gpu(rng, f"g{i + 1}") for i in range(n_gpus)]
    if laws == "wide":
        gpus = [Gpu(**{**g.__dict__, "memory": loguniform(rng, 0.25, 4.0)}) for g in gpus]
        jobs = [draw_job_wide(rng, i + 1, gpus[0]) for i in range(n_jobs)]
    else:
        jobs = [draw_job(rng, i + 1, gpus[0]) for i in range(n_jobs)]
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "summary_train.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(TRAIN_HEADER)
        for job in jobs:
            for b in job.grid:
                for run, e in enumerate(job.epochs[b], start=1):
                    w.writerow((job.name, "net", b, "sgd", "1e-3", run, TARGET, "" if math.isnan(e) else int(e)))
    for gpu in gpus:
        with open(out / f"summary_power_{gpu.name}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(POWER_HEADER)
            for job in jobs:
                w.writerows(power_rows(rng, job, gpu))
    with open(out / "jobs.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(JOBS_HEADER)
        for job in jobs:
            w.writerow((job.name, job.name, "net", "sgd", TARGET, job.max_epochs, job.default, job.law))
    lines = [
        f"# Generated traces (scripts/gen_traces.py --seed {seed} --jobs {n_jobs} --gpus {n_gpus}"
        + (f" --laws {laws})" if laws != "paper" else ")"),
        "",
        "Same format as the shared traces; jobs.csv names each job's max_epochs and default batch size.",
        "",
        *(
            f"- {g.name}: limits {', '.join(f'{x:g}' for x in g.limits)} W, speed {g.speed:.2f}, "
            f"saturation {g.saturation:.2f}, alpha {g.alpha:.2f}"
            for g in gpus
        ),
        "",
        *(f"- {j.name}: grid {list(j.grid)}, default {j.default}, max_epochs {j.max_epochs}; {j.law}" for j in jobs),
        "",
    ]
    (out / "README.md").write_text("\n".join(lines), encoding="utf-8")
    return jobs, gpus


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="directory to write the traces into (created)")
    ap.add_argument("--jobs", type=int, default=26, help="jobs to draw (default: 26)")
    ap.add_argument("--gpus", type=int, default=4, help="GPUs to draw, named g1, g2, ... (default: 4)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the draw (default: 0)")
    ap.add_argument(
        "--laws",
        choices=("paper", "wide"),
        default="paper",
        help="paper: the laws above (seed 0's set, unchanged); wide: also a critical batch size, a learning rate tuned "
        "for one batch size, a per-step overhead, memory-bound out-of-memory, defaults far off (default: paper)",
    )
    args = ap.parse_args(argv)
    if args.jobs < 1 or args.gpus < 1:
        ap.error(f"--jobs {args.jobs} --gpus {args.gpus}: use whole numbers >= 1")
    jobs, gpus = generate(args.out, args.jobs, args.gpus, args.seed, args.laws)
    print(f"wrote {len(jobs)} jobs x {len(gpus)} GPUs ({len(jobs) * len(gpus)} pairs) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
