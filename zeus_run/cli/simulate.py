"""``zeus-run simulate``: what zeus-run would save, replayed on training and power traces."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from zeus_run.cli._common import (
    Format,
    FormatOption,
    NoEarlyStopOption,
    Policy,
    beta_option,
    err_console,
    eta_option,
    handle_errors,
    objective_option,
    out_console,
    resolve_beta,
    resolve_objective,
    setup_logging,
)
from zeus_run.errors import UsageError

if TYPE_CHECKING:
    from zeus_run.cli._render import Grid
    from zeus_run.sim import Life, SimResult, TraceJob

#: The Zeus paper's jobs (`zeus_run.sim.JOBS`), named here so ``--help`` need not load the traces module.
PAPER_JOBS = ("cifar100", "imagenet", "squad", "librispeech", "movielens-1m", "sentiment140")

#: Without --eta / --beta (the Zeus paper's settings).
DEFAULT_ETA = 0.5
DEFAULT_BETA = 2.0


def parse_seeds(text: str) -> list[int]:
    """``1-5``, ``1,3,7`` or a mix -> seeds.

    Raises:
        UsageError: Not of that form.
    """
    out: list[int] = []
    try:
        for part in text.split(","):
            if "-" in part:
                lo, hi = part.split("-", 1)
                out.extend(range(int(lo), int(hi) + 1))
            elif part.strip():
                out.append(int(part))
    except ValueError:
        raise UsageError(f"--seeds {text!r} is not a list of seeds; use e.g. 1-5 or 1,2,3.") from None
    if not out:
        raise UsageError(f"--seeds {text!r} names no seed; use e.g. 1-5.")
    return out


def parse_horizon(text: str) -> int | None:
    """``paper`` -> None (2 x |B| x |P|), else a positive integer.

    Raises:
        UsageError: Neither.
    """
    if text == "paper":
        return None
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise UsageError(f"--horizon {text!r} must be a positive number of recurrences or `paper` (2 x |B| x |P|).")


def parse_life(text: str | None) -> Life | None:
    """``--life SCALE`` as a `zeus_run.sim.Life` (None: a quiet life).

    Raises:
        UsageError: Not a scale in range.
    """
    if text is None:
        return None
    from zeus_run.sim import Life

    try:
        return Life.parse(text)
    except ValueError as exc:
        raise UsageError(f"--{exc}.") from None


def resolve_job(ref: str) -> TraceJob:
    """A paper job by name, or a job spec YAML path."""
    from zeus_run.sim import JOBS, find_job, load_trace_job

    if ref in JOBS:
        return find_job(ref)
    if ref.endswith((".yaml", ".yml")) or Path(ref).exists():
        return load_trace_job(ref)
    return find_job(ref)


@handle_errors
def simulate_command(
    jobs: list[str] = typer.Argument(
        ...,
        metavar="JOB...",
        help=f"Job names ({', '.join(PAPER_JOBS)}) or job spec YAML files naming dataset/network/optimizer.",
    ),
    traces: Path | None = typer.Option(
        None, "--traces", help="Directory with summary_train.csv and summary_power_<gpu>.csv."
    ),
    gpu: str = typer.Option("v100", "--gpu", help="GPU of the power trace in --traces."),
    train: Path | None = typer.Option(None, "--train", help="Train trace CSV (overrides --traces)."),
    power: Path | None = typer.Option(None, "--power", help="Power trace CSV (overrides --traces/--gpu)."),
    eta: float | None = eta_option(f"{DEFAULT_ETA}"),
    objective: str | None = objective_option(f"cost={DEFAULT_ETA}"),
    beta: float | None = beta_option(f"{DEFAULT_BETA}"),
    no_early_stop: bool = NoEarlyStopOption,
    seeds: str = typer.Option("1", "--seeds", help="Seeds, e.g. 1-5 or 1,2,3."),
    horizon: str = typer.Option(
        "paper", "--horizon", help="Recurrences, or `paper` (2 x |batch sizes| x |power limits|)."
    ),
    policy: Policy = typer.Option(Policy.zeus_voi, "--policy", case_sensitive=False, help="Batch-size policy."),
    concurrency: int = typer.Option(
        1,
        "--concurrency",
        min=1,
        help="Recurrences in flight at once: each starts the moment one ends and sees only the trials that "
        "ended before it (trials end in order of simulated time).",
    ),
    life: str | None = typer.Option(
        None,
        "--life",
        help="Live bad nights, SCALE times as often as the default life (1): out of memory at the largest batch "
        "sizes, slow nights and slow tries (multiplied or added), interruptions, cluster losses, an environment "
        "error; seeded. The truth (cost_vs_default) is what the default would have spent over the same life. "
        "oom@N: the Oracle's batch size and every larger one run out of memory on night N alone (oom@N+M: nights N and "
        "M; 1,oom@N: both lives).",
        metavar="SCALE",
    ),
    run_dir: Path | None = typer.Option(
        None,
        "--run-dir",
        help="Write one run directory per (job, seed) here, readable by `zeus-run history` and `zeus-run plot`.",
    ),
    fmt: Format = FormatOption,
) -> None:
    """Replay recurring jobs on traces with the same optimizer as real runs, against Default, Oracle and grid search.

    Example:

        zeus-run simulate cifar100 imagenet --traces ../shared/traces --gpu a40 --seeds 1-5

        zeus-run simulate job.yaml --train t.csv --power p.csv --horizon 50 --run-dir runs/sim --format json

        zeus-run simulate squad --traces ../shared/traces --concurrency 4 --seeds 1-10

        zeus-run simulate cifar100 --traces ../shared/traces --objective max-slowdown=1.1 --run-dir runs/sim

        zeus-run simulate cifar100 --traces ../shared/traces --horizon 30 --life 1 --run-dir runs/life
    """
    from zeus_run.cli._render import print_grid
    from zeus_run.sim import job_table, load_traces, simulate
    from zeus_run.spec import OptimizerSettings

    setup_logging()
    goal = resolve_objective(objective, eta)
    eta_value = goal.cost_eta if goal is not None else DEFAULT_ETA if eta is None else eta
    beta_value = resolve_beta(beta, no_early_stop, DEFAULT_BETA)
    train_csv = train or (traces / "summary_train.csv" if traces else None)
    power_csv = power or (traces / f"summary_power_{gpu}.csv" if traces else None)
    if train_csv is None or power_csv is None:
        raise UsageError("pass --traces DIR (with --gpu), or both --train and --power.")
    seed_list, n = parse_seeds(seeds), parse_horizon(horizon)
    bad_nights = parse_life(life)
    loaded = load_traces(train_csv, power_csv)
    settings = OptimizerSettings.for_policy(policy.value)
    rows: list[dict] = []
    for ref in jobs:
        table = job_table(loaded, resolve_job(ref))
        results = [
            simulate(
                table,
                eta=eta_value,
                beta=beta_value,
                seed=s,
                horizon=n,
                settings=settings,
                concurrency=concurrency,
                objective=goal,
                life=bad_nights,
                max_early_stops=3 if bad_nights is not None else None,
            )
            for s in seed_list
        ]
        if run_dir is not None:
            for r in results:
                write_run_dir(run_dir / f"{table.job.name}-{table.gpu}-{policy.value}-seed{r.seed}", r)
        # Overlap adds its setting; serial output stays as it was.
        summaries = [r.to_json() | ({"concurrency": concurrency} if concurrency > 1 else {}) for r in results]
        if fmt is Format.json:
            for summary in summaries:
                out_console().print_json(json.dumps(summary))
        elif fmt is Format.csv:
            rows.extend(_flat(summary) for summary in summaries)
        else:
            print_grid(out_console(), result_table(results, concurrency))
    if rows:
        w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    if run_dir is not None:
        err_console().print(
            f"Run directories written under {run_dir}; see one with: zeus-run history {run_dir}/<name>  "
            f"(or zeus-run plot {run_dir}/<name>)"
        )


def _flat(d: dict, prefix: str = "") -> dict:
    """Nested dicts as ``a_b`` columns, for CSV."""
    out: dict = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}_"))
        else:
            out[f"{prefix}{k}"] = v
    return out


def result_table(results: list[SimResult], concurrency: int = 1) -> Grid:
    """One job's seeds and its baselines (``concurrency``: recurrences in flight).

    One saving per run, as ``history`` states it on the run's directory, with its 90% interval
    (`zeus_run.views.saving`); beside it the truth it is checked against, which only a
    simulation knows: ``1 - cost / Default``, the traces' expected Default over the same recurrences.
    """
    from zeus_run.cli._render import Grid
    from zeus_run.views.saving import short

    first = results[0]
    t = first.table
    title = (
        f"{t.job.name} on {t.gpu}: {first.policy}, horizon {first.horizon}, b0 {t.default_batch_size}, "
        f"{len(t.batch_sizes)} batch sizes x {len(t.power_limits)} power limits"
        + (f", {concurrency} recurrences in flight" if concurrency > 1 else "")
    )
    table = Grid(
        title,
        [
            (col, "left" if col == "run" else "right")
            for col in ("run", "cost (MJ)", "saved (90% interval)", "true saving", "regret", "final bs", "final PL W")
        ],
        caption="saved: the cost saved against b0's simulated runs at the max power limit, as `history` states it "
        "(no measurable difference: its 90% interval holds 0); true saving: 1 - cost / Default, the Default being "
        "b0 at the max power limit expected from the traces (only a simulation knows it); regret: cost / Oracle - 1",
    )
    d = first.default
    for r in results:
        table.add_row(
            f"seed {r.seed}",
            f"{r.cost / 1e6:.4g}",
            short(r.saved()["cost"]),
            _pct(1.0 - r.cost / r.default_cost),
            f"{r.regret * 100:.1f}%",
            str(r.final[0]),
            f"{r.final[1]:g}",
        )
    h = first.horizon
    o = first.oracle
    table.add_row(
        "Default",
        f"{h * d.cost / 1e6:.4g}",
        "",
        "0.0% saved",
        f"{(d.cost / o.cost - 1) * 100:.1f}%",
        str(d.batch_size),
        f"{d.power_limit:g}",
    )
    table.add_row(
        "Oracle",
        f"{h * o.cost / 1e6:.4g}",
        "",
        _pct(1.0 - o.cost / d.cost),
        "0.0%",
        str(o.batch_size),
        f"{o.power_limit:g}",
    )
    if math.isfinite(first.grid_cost):
        grid = [r.grid_cost for r in results]
        g = sum(grid) / len(grid)
        table.add_row(
            "Grid (mean)",
            f"{g / 1e6:.4g}",
            "",
            _pct(1.0 - g / (h * d.cost)),
            f"{(g / (h * o.cost) - 1) * 100:.1f}%",
            "",
            "",
        )
    return table


def _pct(v: float) -> str:
    """A saving as ``history`` words it (`zeus_run.views.saving.pct`)."""
    from zeus_run.views.saving import pct

    return pct(v)


def write_run_dir(path: Path, result: SimResult) -> None:
    """A run directory in the real runs' format (spec.yaml + history.jsonl)."""
    import yaml

    from zeus_run.rundir.opener import lock
    from zeus_run.rundir.store import atomic_write

    t = result.table
    assert result.knobs is not None  # `simulate` sets it
    spec = {
        "name": t.job.name,
        "kind": "simulated",
        **result.knobs.to_dict(),
        "recurrences": result.horizon,
        "trace": {"gpu": t.gpu, "dataset": t.job.dataset, "network": t.job.network, "optimizer": t.job.optimizer},
    }
    with lock(path, "run") as rd:  # the one opener
        if rd.history.path.exists():
            raise UsageError(f"{str(path)!r} already holds a history; choose an empty --run-dir.")
        atomic_write(rd.spec_path, "# Simulated run (zeus-run simulate).\n" + yaml.safe_dump(spec, sort_keys=False))
        for rec in result.records:
            rd.history.append(rec)
    _write_profiles(path, result)


def _write_profiles(path: Path, result: SimResult) -> None:
    """The traced power profiles of the batch sizes the run tried, as a real run stores its measured ones."""
    from zeus_run.optimizer import PowerLimitMeasurement
    from zeus_run.power import ProfileStore

    t = result.table
    store = ProfileStore(path, key=f"1 x {t.gpu} (trace)")
    for bs in sorted({r.batch_size for r in result.records}):
        i = t.index(bs)
        profile = [
            PowerLimitMeasurement(pl, float(t.avg_power[i, j]), 1.0 / float(t.time_per_epoch[i, j]))
            for j, pl in enumerate(t.power_limits)
            if not math.isnan(t.time_per_epoch[i, j])
        ]
        if profile:
            store.put(bs, profile)
