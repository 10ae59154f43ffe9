"""The MLflow export's start plans: a nested run per trigger of a job with a ``start`` section (`zeus_run.export._mlflow`
describes what it carries)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from zeus_run.start import iso
from zeus_run.views.starts import StartRow


def start_state(row: StartRow) -> str:
    """Where a trigger stands: ``ran`` (its outcome is recorded), ``interrupted`` (its wait was stopped, nothing
    ran) or ``pending`` (waiting or running)."""
    return "ran" if row.ran else "interrupted" if row.interrupted is not None else "pending"


def log_start(client: Any, exp_id: str, parent: str, row: StartRow, known: tuple[str, str] | None) -> None:
    """The nested run of one trigger's start plan: made once with the plan; its outcome logged once it landed."""
    from mlflow.entities import Metric, Param, RunStatus

    state = start_state(row)
    if known is not None and known[1] == state:
        return
    trigger_ms = int(row.trigger * 1000)
    if known is None:
        run = client.create_run(
            exp_id,
            start_time=trigger_ms,
            run_name=f"start {iso(row.trigger)}",
            tags={
                "mlflow.parentRunId": parent,
                "zeus_run.role": "start",
                "zeus_run.start_trigger": iso(row.trigger),
                "zeus_run.start_outcome": "pending",
            },
        )
        run_id = str(run.info.run_id)
        params = {
            "trigger": iso(row.trigger),
            "start_at": iso(row.start_at),
            "deadline": iso(row.deadline),
            "moved": str(row.moved).lower(),
            "reason": row.reason[:500],
            "provenance": row.provenance,
            "planned_duration_s": "none" if row.planned_duration is None else f"{row.planned_duration:g}",
        }
        plan = {
            "delay_seconds": row.delay,
            "forecast_now_g_per_kwh": row.forecast_now,
            "forecast_at_start_g_per_kwh": row.forecast_at_start,
        }
        client.log_batch(
            run_id,
            params=[Param(k, v) for k, v in params.items()],
            metrics=[Metric(k, float(v), trigger_ms, 0) for k, v in plan.items() if v is not None],
        )
        client.set_terminated(run_id, status=RunStatus.to_string(RunStatus.FINISHED), end_time=int(row.deadline * 1000))
    else:
        run_id = known[0]
    if state == "ran":
        end = _ms(row.ended_at, trigger_ms)
        outcome = {
            "intensity_g_per_kwh": row.intensity,
            "on_time_intensity_g_per_kwh": row.on_time_intensity,
            "carbon_grams": row.carbon_g,
            "saved_grams": row.saved_g,
            "saved_share": row.saved_share,
            "deadline_met": None if row.deadline_met is None else float(row.deadline_met),
        }
        client.log_batch(
            run_id,
            params=[Param("recurrences", ",".join(map(str, row.recurrences)) or "none")],
            metrics=[Metric(k, float(v), end, 0) for k, v in outcome.items() if v is not None],
        )
    if state != "pending":
        client.set_tag(run_id, "zeus_run.start_outcome", state)


def _ms(text: str | None, default: int) -> int:
    try:
        return int(datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp() * 1000) if text else default
    except ValueError:
        return default
