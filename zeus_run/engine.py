"""The recurrence loop, shared by real runs, simulation and replay.

The engine knows nothing about processes or traces: an *executor* turns a
`TrialRequest` into a `TrialRecord`. Everything the engine needs to continue
(optimizer state, best cost, where it stands) is derived from the records so
far, so starting, resuming and replaying are one code path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from zeus_run.cost import cost_threshold
from zeus_run.errors import ConvergenceError
from zeus_run.optimizer import BatchSizeOptimizer, Decision
from zeus_run.records import TrialRecord


@dataclass(frozen=True)
class TrialRequest:
    """What the engine asks an executor to run.

    Attributes:
        recurrence: 1-based recurrence number.
        attempt: 1-based try within the recurrence.
        trial: 0-based index of the trial in the run (records so far).
        observed: Number of observations the optimizer has seen (seeds per-trial randomness).
        decision: The optimizer's choice.
        cost_threshold: Early-stop threshold (unit: J; inf: none).
    """

    recurrence: int
    attempt: int
    trial: int
    observed: int
    decision: Decision
    cost_threshold: float


Executor = Callable[[TrialRequest], TrialRecord]


@dataclass(frozen=True)
class Position:
    """Where a run stands, derived from its records.

    Attributes:
        recurrence: Recurrence to run next.
        attempt: Try number of the next trial within it.
        tries: Observed (counted) tries already spent on that recurrence.
        min_cost: Cheapest total cost of a converged recurrence (unit: J; inf if none).
        completed: Recurrences that reached the target.
    """

    recurrence: int
    attempt: int
    tries: int
    min_cost: float
    completed: int


def position(records: Sequence[TrialRecord]) -> Position:
    """Derive the run's position from its records (pure)."""
    min_cost = math.inf
    completed = 0
    rec, attempt, tries, acc = 1, 1, 0, 0.0
    for r in records:
        if r.recurrence != rec:
            rec, tries, acc = r.recurrence, 0, 0.0
        attempt = r.attempt + 1
        if r.observed:
            tries += 1
            acc += r.spent_cost
        if r.reached:
            completed += 1
            min_cost = min(min_cost, acc)
            rec, attempt, tries, acc = rec + 1, 1, 0, 0.0
    return Position(rec, attempt, tries, min_cost, completed)


def observations(records: Iterable[TrialRecord]):
    """The optimizer's observations, in order."""
    return [o for o in (r.observation for r in records) if o is not None]


class Engine:
    """Runs recurrences until ``recurrences`` have converged.

    Args:
        optimizer: The batch-size optimizer.
        recurrences: Total recurrences of the job.
        max_tries: Counted tries per recurrence before giving up.
        beta: Early-stop knob (None: off).
    """

    def __init__(self, optimizer: BatchSizeOptimizer, recurrences: int, max_tries: int, beta: float | None) -> None:
        self.optimizer = optimizer
        self.recurrences = recurrences
        self.max_tries = max_tries
        self.beta = beta

    def run(
        self,
        history: Sequence[TrialRecord],
        execute: Executor,
        on_record: Callable[[TrialRecord], None] = lambda r: None,
    ) -> list[TrialRecord]:
        """Continue the run from ``history``.

        Args:
            history: Records so far (empty for a new run).
            execute: Runs one trial.
            on_record: Called with each new record right after it is produced
                (the runner persists it here, before the next trial starts).

        Returns:
            The new records. The loop also ends early, without error, after a
            record with ``stop_reason == "interrupted"``.

        Raises:
            ConvergenceError: The first recurrence did not converge, or a
                recurrence used up ``max_tries``.
        """
        opt = self.optimizer
        state = opt.fold(observations(history))
        pos = position(history)
        rec, attempt, tries, min_cost = pos.recurrence, pos.attempt, pos.tries, pos.min_cost
        trial = len(history)
        n_obs = len(observations(history))
        acc = _recurrence_cost(history, rec)
        new: list[TrialRecord] = []
        while rec <= self.recurrences:
            if tries >= self.max_tries:
                raise ConvergenceError(
                    f"Recurrence {rec} did not reach the target in {self.max_tries} tries. The target may be "
                    "unreachable with these batch sizes; check target_metric and max_epochs, or raise max_tries."
                )
            decision = opt.decide(state)
            req = TrialRequest(rec, attempt, trial, n_obs, decision, cost_threshold(self.beta, min_cost))
            record = execute(req)
            new.append(record)
            on_record(record)
            trial += 1
            attempt += 1
            if record.stop_reason == "interrupted":
                return new
            obs = record.observation
            if obs is not None:
                state = opt.observe(state, obs)
                n_obs += 1
                tries += 1
                acc += record.spent_cost
            if record.reached:
                min_cost = min(min_cost, acc)
                rec, attempt, tries, acc = rec + 1, 1, 0, 0.0
            elif rec == 1 and obs is not None:
                raise ConvergenceError(
                    f"The first recurrence ran batch size {record.batch_size} and it did not reach the target "
                    f"({record.stop_reason}: {record.message or 'see its log'}). zeus-run needs the default batch "
                    "size to converge: check target_metric, higher_is_better, max_epochs and the script."
                )
        return new


def _recurrence_cost(records: Sequence[TrialRecord], rec: int) -> float:
    return sum(r.spent_cost for r in records if r.recurrence == rec and r.observed)
