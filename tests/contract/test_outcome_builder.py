"""The one builder of a trial's outcome (`zeus_run.contract.TrialOutcome.of`), and that every door builds through it."""

from __future__ import annotations

import ast
from pathlib import Path

from zeus_run.contract import StopReason, TrialOutcome, crash_cause
from zeus_run.cost import zeus_cost

PACKAGE = Path(__file__).resolve().parents[2] / "zeus_run"


def test_the_cost_is_the_zeus_cost_under_eta_unless_the_meter_charged_it():
    o = TrialOutcome.of(StopReason.TARGET_REACHED, epochs=3, time=10.0, energy=2000.0, max_power=300.0, eta=0.5)
    assert o.cost == zeus_cost(2000.0, 10.0, 0.5, 300.0) == 0.5 * 2000.0 + 0.5 * 300.0 * 10.0
    assert (o.reached, o.cause, o.exit_code, o.epochs) == (True, None, None, 3)
    charged = TrialOutcome.of(StopReason.COST_THRESHOLD, time=1.0, energy=1.0, max_power=300.0, eta=0.5, cost=7.0)
    assert (charged.cost, charged.reached) == (7.0, False)
    assert TrialOutcome.of(StopReason.INTERRUPTED, max_power=300.0).cost == 0.0


def test_the_cause_comes_from_the_message_unless_given():
    message = "exit code 1; last output:\nTraceback (most recent call last):\nRuntimeError: CUDA out of memory"
    o = TrialOutcome.of(StopReason.CRASHED, max_power=1.0, exit_code=1, message=message)
    assert o.cause == crash_cause(StopReason.CRASHED, message, 1) == "RuntimeError: CUDA out of memory"
    assert TrialOutcome.of(StopReason.CRASHED, max_power=1.0, message=message, cause="said").cause == "said"
    assert TrialOutcome.of(StopReason.TARGET_REACHED, max_power=1.0, reached=False).reached is False


def test_no_door_builds_an_outcome_by_hand():
    by_hand = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "TrialOutcome":
                by_hand.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert by_hand == [], f"build outcomes with TrialOutcome.of: {by_hand}"
