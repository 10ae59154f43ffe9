"""``zeus-run replay``: audit a run's decisions, or evaluate other knobs on its recorded outcomes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

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
    run_dir_history,
    setup_logging,
)


@handle_errors
def replay_command(
    path: Path = typer.Argument(..., metavar="RUN_DIR", help="A run directory (with history.jsonl and spec.yaml)."),
    eta: float | None = eta_option("the recorded eta"),
    objective: str | None = objective_option("the recorded objective"),
    beta: float | None = beta_option("the recorded beta"),
    no_early_stop: bool = NoEarlyStopOption,
    window_size: int | None = typer.Option(None, "--window-size", min=0, help="What-if: another bandit window."),
    policy: Policy | None = typer.Option(None, "--policy", case_sensitive=False, help="What-if: another policy."),
    seed: int | None = typer.Option(None, "--seed", help="What-if: another optimizer seed."),
    fmt: Format = FormatOption,
) -> None:
    """Audit a run, or evaluate what other knobs would have done on its recorded outcomes.

    Without knobs: re-fold the history and check that the optimizer reproduces every recorded
    decision; prints the first divergence and exits 1 if any. With knobs: the recorded trials
    become an empirical trace per batch size and the new configuration is replayed on it;
    batch sizes the history never observed are reported as unknown, never invented.

    Without --eta, --objective, --beta, --no-early-stop, --window-size, --policy or --seed
    the replay is an audit; with any of them, a what-if. The eta and beta options
    mean what they mean in `zeus-run simulate` and in the spec.

    Example:

        zeus-run replay runs/demo

        zeus-run replay runs/demo --eta 0.9 --policy zeus-plus

        zeus-run replay runs/demo --no-early-stop --format json

        zeus-run replay runs/demo --objective max-slowdown=1.1
    """
    from zeus_run.cli._render import fmt_energy, history_table, print_grid
    from zeus_run.door.opening import pending_records
    from zeus_run.engine.replay import Knobs, audit, what_if, with_changes
    from zeus_run.rundir.history import read_history

    setup_logging()
    resolve_beta(beta, no_early_stop, None)  # the same checks as everywhere
    goal = resolve_objective(objective, eta)
    hist = run_dir_history(path)
    records = read_history(hist)
    knobs = Knobs.from_run_dir(hist.parent)
    policy_name = policy.value if policy is not None else None
    changed = any(v is not None for v in (eta, goal, beta, window_size, policy_name, seed)) or no_early_stop
    out = out_console()
    if not changed:
        in_flight = pending_records(hist.parent, records)  # adopted or running: decided, not yet recorded
        result = audit(records, knobs, in_flight)
        if fmt is not Format.table:
            d = result.divergence
            print(
                json.dumps(
                    {
                        "checked": result.checked,
                        "records": len(records),
                        "in_flight": len(in_flight),
                        "divergence": None if d is None else d.__dict__,
                    }
                )
            )
        elif result.divergence is None:
            also = f" (and {len(in_flight)} of trials still in flight)" if in_flight else ""
            out.print(f"[green]✓[/] replay reproduces all {result.checked} recorded decisions in {hist}{also}")
        else:
            err_console().print(
                f"[red]✗[/] replay diverges after {result.checked} matching record(s): {result.divergence.describe()}"
            )
        if result.divergence is not None:
            raise typer.Exit(1)
        return
    new = with_changes(knobs, eta=eta, beta=beta, window_size=window_size, policy=policy_name, seed=seed)
    if goal is not None:
        new = replace(new, eta=goal.cost_eta, objective=goal)
    elif eta is not None:
        new = replace(new, objective=None)
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
    if fmt is Format.json:
        print(json.dumps({"summary": summary, "trials": [r.to_json() for r in res.records]}, indent=1))
        return
    if fmt is Format.csv:
        print(",".join(summary))
        print(",".join("" if v is None else str(v) for v in summary.values()))
        return
    print_grid(
        out,
        history_table(
            res.records,
            f"What-if replay of {hist.parent} (objective {new.goal.label}, beta={new.beta}, policy={new.optimizer.policy})",
        ),
    )
    rel = summary["relative_cost"]
    out.print(
        f"Replayed {res.recurrences} recurrence(s): cost {fmt_energy(res.cost)} vs {fmt_energy(res.recorded_cost)} "
        f"recorded under the same objective" + (f" ({rel:.3f}x)" if rel is not None else "")
    )
    if res.unknown is not None:
        out.print(
            f"[yellow]Stopped at recurrence {res.stopped_at}:[/] the outcome of batch size {res.unknown} is unknown "
            f"({_escape(res.unknown_reason or '')}), so the replay ends there."
        )


def _escape(text: str) -> str:
    """Rich-markup-escape ``text`` (rich is imported here, not at start-up, to keep ``--help`` fast)."""
    from rich.markup import escape

    return escape(text)
