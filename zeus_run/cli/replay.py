"""``zeus-run replay``: audit a run's decisions, or evaluate other knobs on its recorded outcomes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import typer
from rich.markup import escape

from zeus_run.cli._common import FormatOption, check_format, err_console, handle_errors, out_console, setup_logging
from zeus_run.cli._render import fmt_energy, history_table
from zeus_run.errors import UsageError
from zeus_run.history import read_history, resolve_history_path
from zeus_run.replay import Knobs, audit, what_if, with_changes
from zeus_run.spec._model import POLICIES


@handle_errors
def replay_command(
    path: Path = typer.Argument(..., metavar="RUN_DIR", help="A run directory (with history.jsonl and spec.yaml)."),
    eta: float | None = typer.Option(None, "--eta", min=0.0, max=1.0, help="What-if: another eta."),
    beta: float | None = typer.Option(None, "--beta", min=0.0, help="What-if: another early-stop beta (> 0)."),
    no_early_stop: bool = typer.Option(False, "--no-early-stop", help="What-if: disable early stopping."),
    window_size: int | None = typer.Option(None, "--window-size", min=0, help="What-if: another bandit window."),
    policy: str | None = typer.Option(None, "--policy", help=f"What-if: another policy ({', '.join(POLICIES)})."),
    seed: int | None = typer.Option(None, "--seed", help="What-if: another optimizer seed."),
    fmt: str = FormatOption,
) -> None:
    """Audit a run, or evaluate what other knobs would have done on its recorded outcomes.

    Without knobs: re-fold the history and check that the optimizer reproduces every recorded
    decision; prints the first divergence and exits 1 if any. With knobs: the recorded trials
    become an empirical trace per batch size and the new configuration is replayed on it;
    batch sizes the history never observed are reported as unknown, never invented.

    Example:

        zeus-run replay runs/demo

        zeus-run replay runs/demo --eta 0.9 --policy zeus-plus
    """
    setup_logging()
    check_format(fmt)
    if policy is not None and policy not in POLICIES:
        raise UsageError(f"--policy {policy!r} is not one of {', '.join(POLICIES)}.")
    if beta is not None and beta <= 0:
        raise UsageError("--beta must be greater than 0; use --no-early-stop to disable early stopping.")
    hist = resolve_history_path(path)
    records = read_history(hist)
    knobs = Knobs.from_run_dir(hist.parent)
    changed = any(v is not None for v in (eta, beta, window_size, policy, seed)) or no_early_stop
    if not changed:
        result = audit(records, knobs)
        if fmt != "table":
            d = result.divergence
            print(
                json.dumps(
                    {
                        "checked": result.checked,
                        "records": len(records),
                        "divergence": None if d is None else d.__dict__,
                    }
                )
            )
        elif result.divergence is None:
            out_console.print(f"[green]✓[/] replay reproduces all {result.checked} recorded decisions in {hist}")
        else:
            err_console.print(
                f"[red]✗[/] replay diverges after {result.checked} matching record(s): {result.divergence.describe()}"
            )
        if result.divergence is not None:
            raise typer.Exit(1)
        return
    new = with_changes(knobs, eta=eta, beta=beta, window_size=window_size, policy=policy, seed=seed)
    if no_early_stop:
        new = replace(new, beta=None)
    res = what_if(records, new, recorded=knobs)
    summary = {
        "recurrences": res.recurrences,
        "cost": res.cost,
        "recorded_cost": res.recorded_cost,
        "relative_cost": res.cost / res.recorded_cost if res.recorded_cost else None,
        "unknown_batch_size": res.unknown,
        "unknown_reason": res.unknown_reason,
        "stopped_at_recurrence": res.stopped_at,
        "final_batch_size": res.records[-1].batch_size if res.records else None,
    }
    if fmt == "json":
        print(json.dumps({"summary": summary, "trials": [r.to_json() for r in res.records]}, indent=1))
        return
    if fmt == "csv":
        print(",".join(summary))
        print(",".join("" if v is None else str(v) for v in summary.values()))
        return
    out_console.print(
        history_table(
            res.records,
            f"What-if replay of {hist.parent} (eta={new.eta}, beta={new.beta}, policy={new.optimizer.policy})",
        )
    )
    rel = summary["relative_cost"]
    out_console.print(
        f"Replayed {res.recurrences} recurrence(s): cost {fmt_energy(res.cost)} vs {fmt_energy(res.recorded_cost)} "
        f"recorded under the same eta" + (f" ({rel:.3f}x)" if rel is not None else "")
    )
    if res.unknown is not None:
        out_console.print(
            f"[yellow]Stopped at recurrence {res.stopped_at}:[/] the outcome of batch size {res.unknown} is unknown "
            f"({escape(res.unknown_reason or '')}), so the replay ends there."
        )
