"""Executors of real trials: they turn the engine's `zeus_run.engine.core.TrialRequest` into a `TrialRecord`.

Simulation (`zeus_run.sim.TraceExecutor`) and replay (`zeus_run.engine.replay.EmpiricalExecutor`)
have executors of their own; real runs have these, all shaped alike:

* ``local``: the trial runs as a subprocess of the launcher, watched by the
  trial agent's code in the launcher's process (`zeus_run.trial.agent.run_agent`).
* ``slurm``: the trial is a Slurm batch job that runs the agent
  (``python -m zeus_run.trial.agent PLAN.json``) on a node; the launcher polls
  squeue and the agent's files in the (shared) run directory.

A new backend (Slurm, Kubernetes Jobs) is one new module here with a
`RealExecutor` subclass, registered in `EXECUTORS`.
"""

from zeus_run.contract import RunningMarker
from zeus_run.executors._base import (
    NullRunListener,
    RealExecutor,
    RunListener,
    command,
    learning_rate_for,
    marker,
    measured_by,
    now,
    placeholder_values,
    prepare,
    provenance,
)
from zeus_run.executors._local import LocalExecutor
from zeus_run.executors._slurm import SlurmExecutor

#: Executor classes by kind (``executor.kind`` in the spec).
EXECUTORS: dict[str, type[RealExecutor]] = {"local": LocalExecutor, "slurm": SlurmExecutor}


def recover_trials(markers: list[RunningMarker], run_kind: str | None) -> set[int]:
    """Clean up after the trials a dead launcher left, each with the executor that ran it (it may differ from
    this run's: then nothing is adopted, since this run's executor could not take it over; None: adopt none)."""
    adopted: set[int] = set()
    for kind, cls in EXECUTORS.items():
        mine = [m for m in markers if (m.executor if m.executor in EXECUTORS else "local") == kind]
        if mine:
            adopted |= cls.recover(mine, kind == run_kind)
    return adopted


__all__ = [
    "EXECUTORS",
    "LocalExecutor",
    "NullRunListener",
    "RealExecutor",
    "RunListener",
    "SlurmExecutor",
    "command",
    "learning_rate_for",
    "marker",
    "measured_by",
    "now",
    "placeholder_values",
    "prepare",
    "provenance",
    "recover_trials",
]
