"""Power limits where a trial runs as its own agent (a Slurm node): the plan's part and the agent's part.

The launcher cannot reach a node's GPUs, so it only says what to do: `node_power_plan`
puts the ``power_limit`` settings, the objective and the run directory (where
``power_profiles.json`` lives, shared with the nodes) into the agent's plan. The agent,
on the node, opens a power session over its own GPUs (`open_node_power`): the same
permission probe and ``on_no_permission`` choice, through root or zeusd, the profiles of
its GPU model, and the limits restored after its trial.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zeus_run.energy import EnergySource
from zeus_run.objective import Objective
from zeus_run.power._session import PowerSession, open_power_session
from zeus_run.spec import JobSpec, PowerLimitSettings


def node_power_plan(spec: JobSpec, run_dir: Path, batch_size: int) -> dict[str, Any] | None:
    """The ``power`` part of an agent's plan (None: power limits are off)."""
    if not spec.power_limit.enabled:
        return None
    return {
        "settings": dataclasses.asdict(spec.power_limit),
        "eta": spec.eta,
        "objective": spec.objective.to_json() if spec.objective is not None else None,
        "run_dir": str(run_dir),
        "batch_size": batch_size,
    }


def open_node_power(plan: Mapping[str, Any], energy: EnergySource) -> PowerSession | None:
    """The agent's power session over its own GPUs (None: no NVML GPUs here, or no permission and ``continue``).

    Raises:
        zeus_run.errors.PowerLimitPermissionError: No permission and ``on_no_permission: stop``.
    """
    fields = {f.name for f in dataclasses.fields(PowerLimitSettings)}
    settings = PowerLimitSettings(**{k: v for k, v in plan["settings"].items() if k in fields})
    objective = Objective(**plan["objective"]) if plan.get("objective") else None
    return open_power_session(settings, float(plan["eta"]), energy, Path(plan["run_dir"]), objective)
