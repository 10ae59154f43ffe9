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
from zeus_run.engine.classify import judge, out_of_memory
from zeus_run.engine.concurrent import InOrder
from zeus_run.engine.ledger import Ledger
from zeus_run.engine.position import observation_of
from zeus_run.engine.request import Horizon, TrialRequest
from zeus_run.errors import ConvergenceError, ZeusRunError
from zeus_run.optimizer import BatchSizeOptimizer
from zeus_run.records import TrialRecord

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
    """Runs recurrences until ``recurrences`` have ended: reached the target, or failed.

    Args:
        optimizer: The batch-size optimizer (it plans over its own horizon: the job's).
        recurrences: Recurrences to run in all (where this run stops; failed ones count).
        max_tries: Counted tries per recurrence; the one that uses them up without the target
            fails the recurrence, and the next recurrence starts.
        beta: Early-stop knob (None: off).
        max_early_stops: After this many early stops in one recurrence, its next tries run
            the best known batch size (`best_known`) without a cost threshold, so the
            recurrence ends with a trained model whenever one is reachable. None: never
            (the published algorithm; the trace simulator's default).
        concurrency: Recurrences in flight at once (>= 1). With more than one, records
            carry the context of their decision (`TrialRequest.stamp`).
        oom_retry_after: Stamped on each out-of-memory crash (`tell`): the recurrences that must reach the
            target after it before its batch size may be decided again (`zeus_run.engine.memory`); None: never.
        control_share: The most control runs of the default may take of the job's spend (the spec's
            ``saving.control.max_share``; `zeus_run.engine.control`, consulted before the optimizer); None: never.
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
        oom_retry_after: int | None = None,
        control_share: float | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self.optimizer = optimizer
        self.recurrences = recurrences
        self.max_tries = max_tries
        self.beta = beta
        self.max_early_stops = max_early_stops
        self.concurrency = concurrency
        #: The spec's ``metric`` fields that changed since the history's trials ran (``metric.regex``; the
        #: launcher finds them against the stored spec): a trial then reading no metric is the spec's error.
        self.metric_changed: str | None = None
        #: Recomputes an ended trial's cost from the history before it (the ``max-slowdown``
        #: objective's `zeus_run.objective.SlowdownCharge`); None: the executor's cost stands.
        self.charge = charge
        self.oom_retry_after = oom_retry_after
        #: The most a control run of the default may take of the job's spend (``saving.control.max_share``;
        #: `zeus_run.engine.control`); None: never.
        self.control_share = control_share

    # -- the decision path: every door asks, runs the trial its own way, and tells --------------------

    def ask(self, ledger: Ledger, horizon: Horizon | None = None) -> TrialRequest | None:
        """The next trial: the oldest unfinished recurrence not in flight (else a new one), decided on what
        ``ledger`` has folded and counted in flight there.

        Every door asks here: `run`'s loop (`Engine.run`), ``zeus-run ask`` and ``exec``, the `Job`
        API, the callbacks and the server (`zeus_run.asktell`), and the audit that re-derives each
        recorded decision (`zeus_run.engine.replay`). A recurrence that failed (used up ``max_tries``)
        is over: the next ask starts the next recurrence.

        Args:
            ledger: What the engine knows (the history folded, the trials in flight).
            horizon: What the optimizer plans over, if not its own (the audit's: each record's).

        Returns:
            The trial's request (decision, cost threshold, trial number, decision context), or None
            when every recurrence is done or in flight.
        """
        recurrence = ledger.next_recurrence()
        return None if recurrence is None else ledger.start(recurrence, horizon)

    def tell(
        self,
        request: TrialRequest,
        record: TrialRecord,
        before: Sequence[TrialRecord],
        stamp: bool,
        ledger: Ledger | None = None,
    ) -> tuple[TrialRecord, ZeusRunError | None]:
        """An ended trial's record as the history keeps it, and the error that ends the run after it, if any.

        The second half of every door (`ask`): the record is stamped (the decision's context, its horizon,
        the warm start it was taken with), charged and judged by the one
        classifier (`zeus_run.engine.classify.judge`). The try that uses up ``max_tries`` without the
        target is stamped ``recurrence_failed``: its recurrence failed and the job goes on with the
        next one. The caller appends the record to the history and folds it (`Ledger.fold`; ask/tell
        folds what the history file holds, `zeus_run.door.fold`).

        Args:
            request: The request it was started with.
            record: Its record as its executor (or a tell) made it.
            before: Every record folded before it.
            stamp: Stamp the decision's context (`TrialRequest.stamp`): concurrent runs and asks.
            ledger: What the engine knew before it (its recurrence's tries); None: counted in ``before``.

        Returns:
            The record, and the error that ends the run: a spec or environment error
            (`zeus_run.engine.classify.ConfigurationError`), or the first recurrence not converging at
            the default batch size (`ConvergenceError`); None to go on.
        """
        if stamp:
            record = request.stamp(record)
        if request.horizon is not None and record.horizon is None:
            record = dataclasses.replace(record, horizon=request.horizon)
        warm = getattr(self.optimizer, "warm", None)  # the warm start's source (`zeus_run.engine.warm`)
        if warm is not None and record.warm is None:
            record = dataclasses.replace(record, warm=warm.fingerprint)
        if request.lifetime is not None and record.horizon is None and record.lifetime is None:
            record = dataclasses.replace(record, lifetime=request.lifetime)
        if self.charge is not None:
            record = self.charge(before, record)
        record, fault = judge(record, before, changed=self.metric_changed)
        if record.oom is None and record.kind == "real" and out_of_memory(record):
            record = dataclasses.replace(record, oom=True)  # its retry, and every decision after, goes smaller
        if record.oom and record.oom_retry_after is None and self.oom_retry_after is not None:
            record = dataclasses.replace(record, oom_retry_after=self.oom_retry_after)  # until when: the spec's now
        record = self._gave_up(record, before, ledger)
        return record, fault or self._failure(record)

    def _gave_up(self, record: TrialRecord, before: Sequence[TrialRecord], ledger: Ledger | None) -> TrialRecord:
        """``record``, stamped ``recurrence_failed`` (with why) if it is its recurrence's last try without the target."""
        if not record.observed or record.reached or record.recurrence_failed is not None:
            return record
        if ledger is not None:
            tries = ledger.tries(record.recurrence)
        else:
            tries = sum(1 for r in before if r.recurrence == record.recurrence and r.observed)
        tries += 1
        if tries < self.max_tries:
            return record
        last = str(record.stop_reason) + (f" ({record.cause})" if record.cause else "")
        why = f"{tries} of max_tries {self.max_tries} tries without the target; the last: {last}"
        logger.warning(
            "recurrence %d failed: %s. It is recorded as failed and the job goes on with the next recurrence",
            record.recurrence,
            why,
        )
        return dataclasses.replace(record, recurrence_failed=why)

    def _failure(self, record: TrialRecord) -> ConvergenceError | None:
        """The error that ends the run after ``record``, if any: the first recurrence did not converge at b0."""
        if record.recurrence != 1 or record.reached or observation_of(record) is None:
            return None
        if record.batch_size != self.optimizer.default_batch_size:
            return None  # a retry after a crash with several in flight may run another one: it is just a try
        if record.oom and record.recurrence_failed is None and record.batch_size > min(self.optimizer.batch_sizes):
            return None  # out of memory: its retry runs a smaller batch size (`Ledger`), which may fit
        return ConvergenceError(
            f"The first recurrence ran batch size {record.batch_size} and it did not reach the target "
            f"({record.stop_reason}: {record.message or 'see its log'}). zeus-run needs the default batch "
            "size to converge: check target_metric, higher_is_better, max_epochs and the script."
        )

    def run(
        self,
        history: Sequence[TrialRecord],
        execute: Executor | TrialExecutor,
        on_record: Callable[[TrialRecord], None] = lambda r: None,
        adopted: Sequence[TrialRequest] = (),
        more: Callable[[], int] | None = None,
        on_fold: Callable[[Ledger, TrialRecord], None] | None = None,
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
            on_fold: Called with the ledger and each new record once it is folded (the runner keeps what the
                engine now believes: `zeus_run.door.save.TrialSaver.note`).

        Returns:
            The new records, in the order their trials ended. After a record with
            ``stop_reason`` interrupted nothing new starts and the run returns,
            without error, once the trials in flight have ended.

        Raises:
            ConvergenceError: The first recurrence did not converge at the default batch size
                (raised once the trials in flight have ended). A recurrence that uses up
                ``max_tries`` later does not stop the run: it is recorded as failed
                (``recurrence_failed``) and the next recurrence starts.
            zeus_run.engine.classify.ConfigurationError: A trial failed because of the spec (recorded as
                ``config_error``) or its environment (``environment_error``, `TrialEnvironmentError`);
                raised once the trials in flight have ended.
            Exception: Whatever the executor raises, at once; trials it still runs are its own
                to stop (see `zeus_run.engine.concurrent`).
        """
        executor = execute if isinstance(execute, TrialExecutor) else InOrder(execute)
        ledger = Ledger.from_history(self, history, adopted)
        for adopt in sorted(adopted, key=lambda q: q.trial):
            executor.start(adopt)
        new: list[TrialRecord] = []
        error: ZeusRunError | None = None
        stopping = False
        while True:
            while not stopping and len(ledger.in_flight) < self.concurrency:  # ask, and launch
                request: TrialRequest | None = self.ask(ledger)
                if request is None and more is not None:  # triggers that joined the run, if any
                    self.recurrences += more()
                    request = self.ask(ledger)
                if request is None:
                    break
                executor.start(request)
            if not ledger.in_flight:
                break
            record = self._wait(
                executor, more is not None and not stopping and len(ledger.in_flight) < self.concurrency
            )
            if record is None:
                continue
            ended = ledger.in_flight.get(record.trial)
            if ended is None:
                raise ValueError(
                    f"the executor returned trial {record.trial}, which is not in flight "
                    f"(in flight: {sorted(ledger.in_flight)}); an executor must copy the request's trial"
                )
            record, fault = self.tell(ended, record, [*history, *new], self.concurrency > 1, ledger)  # tell
            new.append(record)
            on_record(record)
            ledger.fold(record)
            if on_fold is not None:
                on_fold(ledger, record)
            error = error or fault
            stopping = stopping or record.stop_reason is StopReason.INTERRUPTED or error is not None
        if error is not None:
            raise error
        return new

    def _wait(self, executor: TrialExecutor, free_slot: bool) -> TrialRecord | None:
        """The next trial to end; with a free slot and ``more`` (joined triggers), None every `JOIN_POLL_S`
        seconds without one, so that the loop looks for triggers that joined the run."""
        if free_slot and isinstance(executor, TimedExecutor):
            return executor.wait_for(JOIN_POLL_S)
        return executor.wait_any()
