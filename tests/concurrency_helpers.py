"""A synthetic job, executors whose trials end in an order a test picks, and the serial loop as it was.

`serial_reference` is the engine's loop from before recurrences could overlap,
kept verbatim as the oracle that ``concurrency: 1`` must still equal.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import random
from collections.abc import Callable
from pathlib import Path

from tests.factories import make_record
from zeus_run.contract import RunningMarker, markers_from_json
from zeus_run.cost import SKIP_PENALTY, cost_threshold
from zeus_run.engine.core import TrialRequest
from zeus_run.engine.position import best_known, observation_of, observations, position
from zeus_run.errors import ConvergenceError
from zeus_run.optimizer import Decision
from zeus_run.records import TrialRecord

BATCH_SIZES = (8, 16, 32, 64, 128)
B0 = 32
MAX_EPOCHS = 12
#: Batch size -> (epochs to reach the target, 0: never; seconds per epoch).
PATHS = {8: (0, 1.0), 16: (4, 1.1), 32: (5, 1.0), 64: (6, 0.8), 128: (9, 0.7)}
#: Cost per second: eta 0.5 x 100 W + 0.5 x 300 W max power.
COST_PER_S = 200.0


def make_execute(
    noise: float = 0.3,
    paths: dict[int, tuple[int, float]] | None = None,
    interrupt: Callable[[TrialRequest], bool] = lambda req: False,
    crash: Callable[[TrialRequest], bool] = lambda req: False,
) -> Callable[[TrialRequest], TrialRecord]:
    """A serial executor of the synthetic job; a trial's outcome depends only on its request (not on call order)."""
    table = paths or PATHS

    def execute(req: TrialRequest) -> TrialRecord:
        rng = random.Random(req.trial * 7919 + req.recurrence)
        bs = req.decision.batch_size
        need, tpe = table[bs]
        if need:
            need += rng.randint(0, 2)
        tpe *= 1.0 + noise * rng.random()
        per = COST_PER_S * tpe
        limit, cut = MAX_EPOCHS, False
        if math.isfinite(req.cost_threshold) and int(req.cost_threshold // per) < limit:
            limit, cut = int(req.cost_threshold // per), True
        fields = dict(
            job="synthetic",
            recurrence=req.recurrence,
            attempt=req.attempt,
            trial=req.trial,
            batch_size=bs,
            stage=req.decision.stage,
            max_power=300.0,
            cost_threshold=req.cost_threshold if math.isfinite(req.cost_threshold) else None,
            detail=req.decision.detail,
        )
        if interrupt(req):
            return make_record(
                epochs=0,
                time=0.0,
                energy=0.0,
                cost=0.0,
                reached=False,
                stop_reason="interrupted",
                observed=False,
                **fields,
            )
        if crash(req):
            t = 0.5 * tpe
            return make_record(
                epochs=0, time=t, energy=100 * t, cost=COST_PER_S * t, reached=False, stop_reason="crashed", **fields
            )
        if limit <= 0:
            return make_record(
                epochs=0,
                time=0.0,
                energy=0.0,
                cost=SKIP_PENALTY * req.cost_threshold,
                reached=False,
                stop_reason="skipped",
                **fields,
            )
        reached = 0 < need <= limit
        epochs = need if reached else limit
        t = epochs * tpe
        reason = "target_reached" if reached else ("cost_threshold" if cut else "max_epochs")
        return make_record(
            epochs=epochs, time=t, energy=100 * t, cost=COST_PER_S * t, reached=reached, stop_reason=reason, **fields
        )

    return execute


class Scripted:
    """A `zeus_run.engine.core.TrialExecutor` whose trials end in the order ``pick`` chooses.

    Args:
        execute: Produces a trial's record when it ends.
        pick: Given the running trials (ascending), the one that ends next.
    """

    def __init__(self, execute: Callable[[TrialRequest], TrialRecord], pick: Callable[[list[int]], int]) -> None:
        self.execute = execute
        self.pick = pick
        self.running: dict[int, TrialRequest] = {}
        self.started: dict[int, TrialRequest] = {}
        self.most = 0

    def start(self, request: TrialRequest) -> None:
        assert request.trial not in self.started
        self.running[request.trial] = request
        self.started[request.trial] = request
        self.most = max(self.most, len(self.running))

    def wait_any(self) -> TrialRecord:
        trial = self.pick(sorted(self.running))
        return self.execute(self.running.pop(trial))


def fifo(running: list[int]) -> int:
    return running[0]


def lifo(running: list[int]) -> int:
    return running[-1]


def random_pick(seed: int) -> Callable[[list[int]], int]:
    rng = random.Random(seed)
    return lambda running: rng.choice(running)


def serial_reference(engine, history, execute, on_record=lambda r: None) -> list[TrialRecord]:
    """The serial loop of `zeus_run.engine.core.Engine.run` before concurrency (the oracle for N=1)."""
    opt = engine.optimizer
    state = opt.fold(observations(history))
    pos = position(history, engine.max_tries)
    rec, attempt, tries, min_cost = pos.recurrence, pos.attempt, pos.tries, pos.min_cost
    early, converged = pos.early_stops, dict(pos.converged)
    trial = len(history)
    n_obs = len(observations(history))
    acc = sum(r.spent_cost for r in history if r.recurrence == rec and r.observed)
    new: list[TrialRecord] = []
    while rec <= engine.recurrences:
        if engine.max_early_stops is not None and early >= engine.max_early_stops:
            bs = best_known(converged, opt.default_batch_size)
            decision = Decision(
                bs,
                "fallback",
                f"{early} early stops in this recurrence: the best known batch size, without a cost threshold",
            )
            threshold = math.inf
        else:
            decision = opt.decide(state)
            threshold = cost_threshold(engine.beta, min_cost)
        record = execute(TrialRequest(rec, attempt, trial, n_obs, decision, threshold))
        gives_up = record.observed and not record.reached and tries + 1 >= engine.max_tries
        if gives_up and rec > 1:  # the recurrence failed: it says so, and the job goes on
            record = dataclasses.replace(record, recurrence_failed="(the reference marks it)")
        new.append(record)
        on_record(record)
        trial += 1
        attempt += 1
        if record.stop_reason == "interrupted":
            return new
        obs = observation_of(record)
        if obs is not None:
            state = opt.observe(state, obs)
            n_obs += 1
            tries += 1
            acc += record.spent_cost
            early += record.stop_reason.early_stop
            if record.reached:
                total, n = converged.get(record.batch_size, (0.0, 0))
                converged[record.batch_size] = (total + record.cost, n + 1)
        if record.reached:
            min_cost = min(min_cost, acc)
            rec, attempt, tries, acc, early = rec + 1, 1, 0, 0.0, 0
        elif rec == 1 and obs is not None:
            raise ConvergenceError(f"The first recurrence ran batch size {record.batch_size} and did not converge.")
        elif record.recurrence_failed is not None:
            rec, attempt, tries, acc, early = rec + 1, 1, 0, 0.0, 0
    return new


def run_to_end(run: Callable[..., object], limit: int = 50) -> tuple[list[TrialRecord], bool]:
    """``run(history, on_record)`` again after each interruption (a resume) until it ends.

    Returns:
        Every record, and whether the run ended with a `ConvergenceError`.
    """
    history: list[TrialRecord] = []
    for _ in range(limit):
        got: list[TrialRecord] = []
        try:
            run(list(history), got.append)
        except ConvergenceError:
            return history + got, True
        history += got
        if not any(r.stop_reason == "interrupted" for r in got):
            return history, False
    raise AssertionError(f"still interrupted after {limit} resumes")


def when(stamp: str | None) -> float:
    """A record's ``started_at``/``ended_at`` as a POSIX time."""
    assert stamp is not None
    return dt.datetime.fromisoformat(stamp).timestamp()


def overlapping(records: list[TrialRecord]) -> int:
    """Pairs of trials that ran at the same time (by their recorded start and end)."""
    spans = [(when(r.started_at), when(r.ended_at)) for r in records]
    return sum(a0 < b1 and b0 < a1 for i, (a0, a1) in enumerate(spans) for (b0, b1) in spans[i + 1 :])


def in_flight(run_dir: Path) -> list[RunningMarker]:
    """The trials ``running.json`` marks in flight now (none while it is missing or being replaced)."""
    try:
        data = json.loads((run_dir / "running.json").read_text())
    except (OSError, ValueError):
        return []
    return markers_from_json(data)[0]
