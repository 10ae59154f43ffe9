"""The one record factory of the tests: a valid `TrialRecord` with every field overridable.

`make_record` builds a record by its place in the history; `record_for` builds the
record of an engine's request (what executors in the tests return).
"""

from __future__ import annotations

import math
from typing import Any

from zeus_run.contract import StopReason
from zeus_run.engine.core import TrialRequest
from zeus_run.records import TrialRecord


def make_record(trial: int = 0, **fields: Any) -> TrialRecord:
    """Trial ``trial`` of a serial run: recurrence ``trial + 1``, first try, batch size 32, converged.

    Defaults: 3 epochs, 1.5 s, 150 J, 100 W max power, cost 150 J. ``reached`` defaults to
    whether the stop reason is ``target_reached``; ``stop_reason`` to ``target_reached`` when
    ``reached`` (default True) and ``max_epochs`` otherwise.
    """
    reached = fields.get("reached", fields.get("stop_reason", StopReason.TARGET_REACHED) == StopReason.TARGET_REACHED)
    base: dict[str, Any] = dict(
        job="j",
        recurrence=trial + 1,
        attempt=1,
        trial=trial,
        batch_size=32,
        stage="pruning",
        epochs=3,
        time=1.5,
        energy=150.0,
        max_power=100.0,
        cost=150.0,
        reached=reached,
        stop_reason=StopReason.TARGET_REACHED if reached else StopReason.MAX_EPOCHS,
    )
    base.update(fields)
    return TrialRecord(**base)


def record_for(req: TrialRequest, **fields: Any) -> TrialRecord:
    """The record of ``req``: its recurrence, try, trial, batch size, stage, detail and threshold, then ``fields``."""
    base: dict[str, Any] = dict(
        job="t",
        recurrence=req.recurrence,
        attempt=req.attempt,
        trial=req.trial,
        batch_size=req.decision.batch_size,
        stage=req.decision.stage,
        detail=req.decision.detail,
        cost_threshold=None if math.isinf(req.cost_threshold) else req.cost_threshold,
    )
    base.update(fields)
    return make_record(**base)
