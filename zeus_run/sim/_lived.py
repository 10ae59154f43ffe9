"""A simulated life's run and its truth (`zeus_run.sim._life`): resumed as a trigger would, judged against the default."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from zeus_run.contract import StopReason
from zeus_run.sim._life import IDLE_SHARE, OOM_MESSAGE, OOM_SHARE, NightLife

if TYPE_CHECKING:
    from zeus_run.engine.concurrent import Clocked
    from zeus_run.engine.core import TrialRequest
    from zeus_run.engine.knobs import Knobs
    from zeus_run.optimizer import PowerLimitMeasurement
    from zeus_run.records import TrialRecord
    from zeus_run.sim._baselines import Expected
    from zeus_run.sim._simulator import TraceExecutor
    from zeus_run.sim._traces import JobTable


def live(
    knobs: Knobs,
    horizon: int,
    b0: list[PowerLimitMeasurement],
    runs: Callable[[TrialRequest], TrialRecord] | Clocked,
    on_record: Callable[[TrialRecord], None],
) -> list[TrialRecord]:
    """The engine's run through a life: resumed after an interruption or an environment error, as a trigger would."""
    from zeus_run.engine.classify import ConfigurationError

    records: list[TrialRecord] = []

    def keep(record: TrialRecord) -> None:
        records.append(record)
        on_record(record)

    for _ in range(4 * horizon + 1):  # each resume follows a fault of one night's first try: at most one a night
        try:
            knobs.engine(horizon, lambda: b0).run(list(records), runs, keep)
        except ConfigurationError:
            continue
        if not records or records[-1].stop_reason is not StopReason.INTERRUPTED:
            break
    return records


def default_truth(
    table: JobTable,
    executor: TraceExecutor,
    default: Expected,
    nights: tuple[NightLife, ...],
    records: list[TrialRecord],
    max_tries: int = 1,
) -> tuple[float, float, float]:
    """What the default would have spent over ``nights`` (``(cost, energy, time)``; `zeus_run.sim._life`).

    To deliver the same models: one run each night zeus-run delivered one, at that night's slowdown and stalls
    (its run is the night's first try; none on a night without a model); a night the default runs out of memory,
    ``max_tries`` crashes besides (its job retries as zeus-run's does, then runs again once it fits); and what
    environment errors and lost nodes spent (it meets them too; a launcher interrupted under a trial is
    zeus-run's alone: `zeus_run.views.nights.hits_default`).
    """
    from zeus_run.sim._baselines import reference_time

    row, col = table.index(table.default_batch_size), table.power_limits.index(max(table.power_limits))
    ref = reference_time(table)
    delivered = {r.recurrence for r in records if r.reached}
    cost = energy = time = 0.0
    for n, night in enumerate(nights, start=1):
        parts: list[tuple[float, float]] = []
        if night.ooms(table.default_batch_size):
            e, t = executor._charge(row, col, OOM_SHARE, False)
            parts.append((e * max_tries, t * max_tries))
        if n in delivered:
            f, stall = executor.slowdown(n) * night.factor(True), night.stall(True)
            parts.append((default.energy * f + stall * IDLE_SHARE * table.max_power, default.time * f + stall))
        for e, t in parts:
            cost += executor.objective.trial_cost(e, t, table.max_power, ref)
            energy, time = energy + e, time + t
    for r in records:  # an environment error or a lost node hits the default too; an interrupted launcher does not
        if r.stop_reason in (StopReason.ENVIRONMENT_ERROR, StopReason.INFRASTRUCTURE):
            cost, energy, time = cost + r.spent_cost, energy + r.energy, time + r.time
    return cost, energy, time


def fault_record(
    executor: TraceExecutor, req: TrialRequest, row: int, night: NightLife, first: bool
) -> TrialRecord | None:
    """The record of a try of ``executor`` that tonight's bad luck ends before it trains (None: it runs)."""
    t = executor.table
    pl = executor.pl_state.predict(t.batch_sizes[row])
    col = t.power_limits.index(pl) if pl in t.power_limits else t.power_limits.index(max(t.power_limits))
    slow = executor.slowdown(req.recurrence) * night.factor(first)

    def cut(share: float, reason: StopReason, message: str, cause: str | None = None) -> TrialRecord:
        epochs = share * (t.mean_epochs[row] if not math.isnan(t.mean_epochs[row]) else t.job.max_epochs)
        energy, time = executor._charge(row, col, float(epochs), False)
        energy, time = energy * slow, time * slow
        return executor._record(
            req,
            col,
            epochs=int(epochs),
            time=time,
            energy=energy,
            cost=executor.objective.trial_cost(energy, time, t.max_power),
            reached=False,
            stop_reason=reason,
            message=message,
            cause=cause,
        )

    if first and night.environment:
        return cut(0.0, StopReason.ENVIRONMENT_ERROR, "ModuleNotFoundError: No module named 'torch'")
    if first and night.lost is not None:
        return cut(night.lost, StopReason.INFRASTRUCTURE, "Slurm NODE_FAIL")
    if first and night.interrupted is not None:
        return cut(night.interrupted, StopReason.INTERRUPTED, "the launcher was interrupted")
    if night.ooms(t.batch_sizes[row]):
        energy, time = executor._charge(row, col, OOM_SHARE, False)
        crash = executor._record(
            req,
            col,
            epochs=0,
            time=time,
            energy=energy,
            cost=executor.objective.trial_cost(energy, time, t.max_power),
            reached=False,
            stop_reason=StopReason.CRASHED,
            message=OOM_MESSAGE,
            cause=OOM_MESSAGE,
        )
        # An ``oom@N`` night's crash is marked as a real one is (`zeus_run.engine.core.Engine.tell`); see `Life`.
        return dataclasses.replace(crash, oom=True) if night.oom_marked else crash
    return None
