"""The recurrence loop, shared by real runs, simulation and replay.

The engine knows nothing about processes or traces: an *executor* turns a
`TrialRequest` into a `TrialRecord`. Everything the engine needs to continue
(optimizer state, best cost, where it stands) is derived from the records so
far, so starting, resuming and replaying are one code path.

Up to ``concurrency`` recurrences can be in flight (`Engine`); their trials
run through a `TrialExecutor` (`zeus_run.engine.concurrent` has adapters). Records
are folded in the order trials end, which is the order of ``history.jsonl``.
With one recurrence in flight this is the serial loop: each decision has seen
every record before it, and the records carry no concurrency fields.

The rule while several recurrences are in flight (the Zeus batch-size server's
"concurrent job" case and the ``concurrency`` flag of its pruning optimizer):

* while pruning exploration waits for the result of its own trial, a
  recurrence that starts runs the best batch size known so far (`best_known`:
  lowest mean cost among converged ones; b0 while none has converged);
* otherwise each recurrence takes the optimizer's decision on the records
  folded when it starts; decisions taken at the same number of observations
  get distinct Thompson draws (``draw``);
* pruning takes only the result of the trial it dispatched (``probe``); every
  other result goes into the bandit's history only;
* the early-stop threshold is beta x the cheapest converged recurrence known
  when the trial starts.

Each concurrent record carries what its decision had seen (``seen``,
``in_flight``, ``draw``, ``probe``), so `zeus_run.engine.replay.audit` re-derives
every decision exactly.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from zeus_run.contract import StopReason
from zeus_run.engine.concurrent import InOrder
from zeus_run.engine.ledger import Ledger
from zeus_run.engine.request import TrialRequest
from zeus_run.errors import ConvergenceError, ZeusRunError
from zeus_run.optimizer import BatchSizeOptimizer
from zeus_run.records import TrialRecord
from zeus_run.trial.classify import unobserve_config_error

logger = logging.getLogger(__name__)


Executor = Callable[[TrialRequest], TrialRecord]


@runtime_checkable
class TrialExecutor(Protocol):
    """Runs several trials at once for the engine (see `zeus_run.engine.concurrent` for the contract and adapters).

    The engine calls both methods from one thread, starts at most
    ``concurrency`` trials before waiting, and waits only while one is in flight.
    """

    def start(self, request: TrialRequest) -> None:
        """Begin running the trial and return without waiting for it."""

    def wait_any(self) -> TrialRecord:
        """Block until a started trial ends; return its record (``trial`` as in its request)."""


@runtime_checkable
class TimedExecutor(TrialExecutor, Protocol):
    """A `TrialExecutor` that can also stop waiting: the engine looks for joined triggers meanwhile."""

    def wait_for(self, timeout: float | None) -> TrialRecord | None:
        """`wait_any`, giving up after ``timeout`` seconds (None: never) with None."""


#: How often a run with a free slot looks for triggers that joined it (unit: s; `zeus_run.rundir.joins`).
JOIN_POLL_S = 0.5


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
        concurrency: Recurrences in flight at once (>= 1). With more than one, records
            carry the context of their decision (`TrialRequest.stamp`).
    """

    def __init__(
        self,
        optimizer: BatchSizeOptimizer,
        recurrences: int,
        max_tries: int,
        beta: float | None,
        max_early_stops: int | None = None,
        concurrency: int = 1,
        charge: Callable[[Sequence[TrialRecord], TrialRecord], TrialRecord] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self.optimizer = optimizer
        self.recurrences = recurrences
        self.max_tries = max_tries
        self.beta = beta
        self.max_early_stops = max_early_stops
        self.concurrency = concurrency
        #: Recomputes an ended trial's cost from the history before it (the ``max-slowdown``
        #: objective's `zeus_run.objective.SlowdownCharge`); None: the executor's cost stands.
        self.charge = charge

    def settle(
        self, request: TrialRequest, record: TrialRecord, before: Sequence[TrialRecord], stamp: bool
    ) -> tuple[TrialRecord, ZeusRunError | None]:
        """An ended trial's record as the history keeps it, and the error that stops the run if the spec made it fail.

        Args:
            request: The request it was started with.
            record: Its record as its executor (or a tell) made it.
            before: Every record folded before it.
            stamp: Stamp the decision's context (`TrialRequest.stamp`): concurrent runs and asks.
        """
        if stamp:
            record = request.stamp(record)
        if request.horizon is not None and record.horizon is None:
            record = dataclasses.replace(record, horizon=request.horizon)
        if self.charge is not None:
            record = self.charge(before, record)
        return unobserve_config_error(record, before)

    def run(
        self,
        history: Sequence[TrialRecord],
        execute: Executor | TrialExecutor,
        on_record: Callable[[TrialRecord], None] = lambda r: None,
        adopted: Sequence[TrialRequest] = (),
        more: Callable[[], int] | None = None,
    ) -> list[TrialRecord]:
        """Continue the run from ``history``.

        Args:
            history: Records so far (empty for a new run), in the order their trials ended.
            execute: Runs trials: a serial `Executor` (with concurrency above 1 its trials
                run one after another, in the order they started), or a `TrialExecutor`.
            on_record: Called with each new record right after its trial ends, before
                anything new starts (the runner persists it here).
            adopted: Trials in flight that a dead launcher started and that go on
                (`zeus_run.rundir.resume.recover`): they are started again first (the executor
                takes each over), in trial order, and fill slots like any other.
            more: Asked, when a slot is free and every recurrence is started, for more
                recurrences to run (triggers that joined the run, `zeus_run.rundir.joins`); returns
                how many, added past ``recurrences``.

        Returns:
            The new records, in the order their trials ended. After a record with
            ``stop_reason`` interrupted nothing new starts and the run returns,
            without error, once the trials in flight have ended.

        Raises:
            ConvergenceError: The first recurrence did not converge, or a
                recurrence used up ``max_tries`` (raised once the trials in flight have ended).
            zeus_run.trial.classify.ConfigurationError: A trial failed because of the spec
                (recorded as ``config_error``; raised once the trials in flight have ended).
            Exception: Whatever the executor raises, at once; trials it still runs are its own
                to stop (see `zeus_run.engine.concurrent`).
        """
        executor = execute if isinstance(execute, TrialExecutor) else InOrder(execute)
        ledger = Ledger.from_history(self, history, adopted)
        for request in sorted(adopted, key=lambda q: q.trial):
            executor.start(request)
        new: list[TrialRecord] = []
        error: ZeusRunError | None = None
        stopping = False
        while True:
            while not stopping and len(ledger.in_flight) < self.concurrency:
                rec = ledger.next_recurrence()
                if rec is None and more is not None:
                    self.recurrences += more()
                    rec = ledger.next_recurrence()
                if rec is None:
                    break
                try:
                    request = ledger.start(rec)
                except ConvergenceError as exc:
                    error, stopping = exc, True
                    break
                executor.start(request)
            if not ledger.in_flight:
                break
            if (
                more is not None
                and not stopping
                and len(ledger.in_flight) < self.concurrency
                and isinstance(executor, TimedExecutor)
            ):
                # A slot is free: look for triggers that joined the run every so often while trials run.
                waited = executor.wait_for(JOIN_POLL_S)
                if waited is None:
                    continue
                record = waited
            else:
                record = executor.wait_any()
            ended = ledger.in_flight.get(record.trial)
            if ended is None:
                raise ValueError(
                    f"the executor returned trial {record.trial}, which is not in flight "
                    f"(in flight: {sorted(ledger.in_flight)}); an executor must copy the request's trial"
                )
            record, spec_fault = self.settle(ended, record, [*history, *new], stamp=self.concurrency > 1)
            error = error or spec_fault
            new.append(record)
            on_record(record)
            ledger.fold(record)
            if error is None:
                error = ledger.failure(record)
            stopping = stopping or record.stop_reason is StopReason.INTERRUPTED or error is not None
        if error is not None:
            raise error
        return new
