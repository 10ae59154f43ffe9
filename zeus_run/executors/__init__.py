"""Executors of real trials: they turn the engine's `zeus_run.engine.TrialRequest` into a `TrialRecord`.

Simulation (`zeus_run.sim.TraceExecutor`) and replay (`zeus_run.replay.EmpiricalExecutor`)
have executors of their own; real runs have these, all shaped alike:

* ``local``: the trial runs as a subprocess of the launcher, watched by the
  trial agent's code in the launcher's process (`zeus_run.agent.run_agent`).

A new backend (Slurm, Kubernetes Jobs) is one new module here with a
`RealExecutor` subclass, registered in `EXECUTORS`.
"""

from zeus_run.executors._base import (
    NullRunListener,
    RealExecutor,
    RunListener,
    learning_rate_for,
    placeholder_values,
    provenance,
)
from zeus_run.executors._local import LocalExecutor

#: Executor classes by kind.
EXECUTORS: dict[str, type[RealExecutor]] = {"local": LocalExecutor}

__all__ = [
    "EXECUTORS",
    "LocalExecutor",
    "NullRunListener",
    "RealExecutor",
    "RunListener",
    "learning_rate_for",
    "placeholder_values",
    "provenance",
]
