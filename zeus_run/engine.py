"""The recurrence loop, shared by real runs, simulation and replay.

The engine knows nothing about processes or traces: an *executor* turns a
`TrialRequest` into a `TrialRecord`. Everything the engine needs to continue
(optimizer state, best cost, where it stands) is derived from the records so
far, so starting, resuming and replaying are one code path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from zeus_run.cost import cost_threshold
from zeus_run.errors import ConvergenceError
from zeus_run.optimizer import BatchSizeOptimizer, Decision
from zeus_run.records import TrialRecord

#: Stop reasons that count as an early stop (the cost threshold cut the trial, or it could not start under it).
EARLY_STOPS = ("cost_threshold", "skipped")


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
        early_stops: Early stops (`EARLY_STOPS`) already taken by that recurrence.
        converged: Per batch size, (sum of costs, count) of its converged trials.
    """

    recurrence: int
    attempt: int
    tries: int
    min_cost: float
    completed: int
    early_stops: int = 0
    converged: dict[int, tuple[float, int]] = field(default_factory=dict)


def position(records: Sequence[TrialRecord]) -> Position:
    """Derive the run's position from its records (pure)."""
    min_cost = math.inf
    completed = 0
    rec, attempt, tries, acc, early = 1, 1, 0, 0.0, 0
    converged: dict[int, tuple[float, int]] = {}
    for r in records:
        if r.recurrence != rec:
            rec, tries, acc, early = r.recurrence, 0, 0.0, 0
        attempt = r.attempt + 1
        if r.observed:
            tries += 1
            acc += r.spent_cost
            early += r.stop_reason in EARLY_STOPS
            if r.reached:
                total, n = converged.get(r.batch_size, (0.0, 0))
                converged[r.batch_size] = (total + r.cost, n + 1)
        if r.reached:
            completed += 1
            min_cost = min(min_cost, acc)
            rec, attempt, tries, acc, early = rec + 1, 1, 0, 0.0, 0
    return Position(rec, attempt, tries, min_cost, completed, early, converged)


def best_known(converged: dict[int, tuple[float, int]], default: int) -> int:
    """The batch size with the lowest mean cost among converged ones (ties: the smaller), or ``default``."""
    if not converged:
        return default
    return min(converged, key=lambda b: (converged[b][0] / converged[b][1], b))


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
        max_early_stops: After this many early stops in one recurrence, its next tries run
            the best known batch size (`best_known`) without a cost threshold, so the
            recurrence ends with a trained model whenever one is reachable. None: never
            (the published algorithm; the trace simulator's default).
    """

    def __init__(
        self,
        optimizer: BatchSizeOptimizer,
        recurrences: int,
        max_tries: int,
        beta: float | None,
        max_early_stops: int | None = None,
    ) -> None:
        self.optimizer = optimizer
        self.recurrences = recurrences
        self.max_tries = max_tries
        self.beta = beta
        self.max_early_stops = max_early_stops

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
        early, converged = pos.early_stops, dict(pos.converged)
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
            if self.max_early_stops is not None and early >= self.max_early_stops:
                bs = best_known(converged, opt.default_batch_size)
                decision = Decision(
                    bs,
                    "fallback",
                    f"{early} early stops in this recurrence: the best known batch size, without a cost threshold",
                )
                threshold = math.inf
            else:
                decision = opt.decide(state)
                threshold = cost_threshold(self.beta, min_cost)
            req = TrialRequest(rec, attempt, trial, n_obs, decision, threshold)
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
                early += record.stop_reason in EARLY_STOPS
                if record.reached:
                    total, n = converged.get(record.batch_size, (0.0, 0))
                    converged[record.batch_size] = (total + record.cost, n + 1)
            if record.reached:
                min_cost = min(min_cost, acc)
                rec, attempt, tries, acc, early = rec + 1, 1, 0, 0.0, 0
            elif rec == 1 and obs is not None:
                raise ConvergenceError(
                    f"The first recurrence ran batch size {record.batch_size} and it did not reach the target "
                    f"({record.stop_reason}: {record.message or 'see its log'}). zeus-run needs the default batch "
                    "size to converge: check target_metric, higher_is_better, max_epochs and the script."
                )
        return new


def _recurrence_cost(records: Sequence[TrialRecord], rec: int) -> float:
    return sum(r.spent_cost for r in records if r.recurrence == rec and r.observed)
