"""What the engine knows at a point of the history: the records folded, and the trials in flight.

One `Ledger` drives a run (`zeus_run.engine.core.Engine.run`), an audit
(`zeus_run.engine.replay.audit`) re-derives every recorded decision with one, and a
server keeps one per job between requests (`zeus_run.door.fold`,
`Ledger.branch`). It applies the rules of `zeus_run.engine.core`: see there for
the concurrent rule.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from zeus_run.engine.control import STAGE as CONTROL
from zeus_run.engine.control import control
from zeus_run.engine.memory import MemoryBans
from zeus_run.engine.position import best_known, observation_of
from zeus_run.engine.request import Horizon, TrialRequest
from zeus_run.optimizer import BatchSizeOptimizer, Decision, Observation
from zeus_run.optimizer.early_stop import SLOWDOWN, Pace
from zeus_run.records import TrialRecord
from zeus_run.spec import DEFAULT_LIFETIME

if TYPE_CHECKING:
    from zeus_run.engine.core import Engine

logger = logging.getLogger(__name__)


@dataclass
class _Recurrence:
    """One recurrence's tries so far (`Ledger`)."""

    attempt: int = 1
    tries: int = 0
    cost: float = 0.0
    early_stops: int = 0
    reached: bool = False
    #: It used up ``max_tries`` without the target (`zeus_run.records.TrialRecord.recurrence_failed`).
    failed: bool = False
    #: Early stops not yet folded into the optimizer (robust rule: until the recurrence ends).
    pending: list = field(default_factory=list)
    #: The smallest batch size that ran out of memory in this recurrence (its retries go below it).
    ceiling: int | None = None


class Ledger:
    """What the engine knows: the records folded so far, in the order trials ended, and the trials in flight.

    The engine keeps one while it runs; `zeus_run.engine.replay.audit` drives one through a
    recorded history to re-derive each decision at the point it was taken.

    Args:
        engine: The engine whose rule it applies.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.state = engine.optimizer.initial_state()
        #: Records folded (the length of the history prefix the next decision sees).
        self.folded = 0
        #: Observations folded (the optimizer's step).
        self.observed = 0
        #: Trials started (the next trial's index).
        self.started = 0
        #: Cheapest total cost of a converged recurrence (unit: J).
        self.min_cost = math.inf
        #: Per batch size, (sum of costs, count) of its converged trials.
        self.converged: dict[int, tuple[float, int]] = {}
        #: Requests of the trials in flight, by trial index.
        self.in_flight: dict[int, TrialRequest] = {}
        self._recurrences: dict[int, _Recurrence] = {}
        self._open: set[int] = set()  # started, not yet converged
        self._newest = 0  # the highest recurrence started
        #: Cost per epoch of converged tries (the robust early-stop rule's yardstick).
        self.pace = Pace(measure=getattr(engine.charge, "pace_cost", None))
        #: Recurrences that ran slow across the board after an early stop -> slowdown (robust rule).
        self.slow: dict[int, float] = {}
        self._branched = False  # a `branch`: shares its tallies with the ledger it came from
        self._planned: dict[Horizon, BatchSizeOptimizer] = {}  # the optimizer under other horizons (an audit's)
        #: The batch sizes out-of-memory crashes shut out of the decisions, and until when (`zeus_run.engine.memory`:
        #: the rule every view folds too).
        self.memory = MemoryBans()
        #: The records folded, in order (`zeus_run.engine.control` decides from them).
        self.records: list[TrialRecord] = []

    @classmethod
    def from_history(
        cls, engine: Engine, history: Sequence[TrialRecord], adopted: Sequence[TrialRequest] = ()
    ) -> Ledger:
        """The ledger after folding ``history``, with ``adopted`` in flight (a new or resumed run).

        Args:
            engine: The engine whose rule it applies.
            history: The records, in the order they were folded.
            adopted: Trials a dead launcher started that go on (`zeus_run.rundir.resume.recover`), each
                with the request it was started with; none of them is in ``history``.
        """
        ledger = cls(engine)
        ledger.extend(history)
        ledger._adopt(adopted)
        return ledger

    def extend(self, records: Sequence[TrialRecord]) -> None:
        """Fold records appended to the history since this ledger was made (each started, and ended)."""
        for record in records:
            self.fold(record)
            self.started = max(self.started, record.trial + 1)

    def branch(self, adopted: Sequence[TrialRequest] = ()) -> Ledger:
        """A copy to decide in, with ``adopted`` in flight; this ledger is left as it is.

        The copy shares what only folding changes (the optimizer's state, each recurrence's
        tally), so it costs a few container copies, not a re-fold of the history: a server
        keeps one folded ledger per job and branches it for every ask. Fold nothing into
        the copy (it raises): fold into this ledger and branch again.
        """
        copy = object.__new__(Ledger)
        copy.__dict__.update(self.__dict__)
        copy.in_flight = dict(self.in_flight)
        copy._recurrences = dict(self._recurrences)
        copy._open = set(self._open)
        copy._branched = True
        copy._adopt(adopted)
        return copy

    def _adopt(self, adopted: Sequence[TrialRequest]) -> None:
        """Count ``adopted`` in flight (trials started before this ledger was made)."""
        self.started = max([self.started, self.folded, *(q.trial + 1 for q in adopted)])
        for request in sorted(adopted, key=lambda q: q.trial):
            self._recurrence(request.recurrence)
            self._open.add(request.recurrence)
            self.in_flight[request.trial] = request

    def fold(self, record: TrialRecord, trial: int | None = None) -> None:
        """Learn from one ended trial (``trial``: its index, if not ``record.trial``)."""
        if self._branched:
            raise RuntimeError("fold into the ledger a branch was taken from, not into the branch (Ledger.branch)")
        self.folded += 1
        self.records.append(record)
        self.in_flight.pop(record.trial if trial is None else trial, None)
        r = self._recurrence(record.recurrence)
        if record.oom and (r.ceiling is None or record.batch_size < r.ceiling):
            r.ceiling = record.batch_size
        self.memory.fold(record)
        if record.attempt >= r.attempt:
            r.attempt = record.attempt + 1
        self._open.add(record.recurrence)
        obs = observation_of(record)
        fails = False
        if obs is not None:
            early = record.stop_reason.early_stop
            robust = self.engine.optimizer.early_stop.robust
            fails = not record.reached and self._fails(record, r.tries + 1)
            if fails and robust:  # the recurrence ends without a model: its early stops count as they are
                pending, r.pending = [*r.pending, obs], []
                for p in pending:
                    self._observe(p)
            elif early and robust:
                r.pending.append(obs)  # judged when the recurrence ends (`zeus_run.optimizer.early_stop`)
            else:
                self._observe(self._settle(record, obs, r) if robust and record.reached else obs)
            r.tries += 1
            r.cost += record.spent_cost
            r.early_stops += early
            if record.reached:
                total, n = self.converged.get(record.batch_size, (0.0, 0))
                self.converged[record.batch_size] = (total + record.cost, n + 1)
                self.pace.add(record)
        if record.reached:
            r.reached, r.failed = True, False
            self._open.discard(record.recurrence)
            if r.cost < self.min_cost:
                self.min_cost = r.cost
        elif fails:
            r.failed = True
            self._open.discard(record.recurrence)  # the job goes on with the next recurrence

    def _fails(self, record: TrialRecord, tries: int) -> bool:
        """Whether ``record``, the recurrence's ``tries``-th counted try, ends it without a model.

        The try that used up ``max_tries`` says so itself (`Engine.tell` stamps ``recurrence_failed``),
        so the history decides, whatever ``max_tries`` says later. A recurrence recorded before
        failures were stamped (it stopped the job then) fails on the try that reached ``max_tries``.
        """
        return record.recurrence_failed is not None or tries >= self.engine.max_tries

    @property
    def memory_ceiling(self) -> int | None:
        """The smallest batch size out-of-memory crashes shut out of the decisions now (it and every larger one;
        `zeus_run.engine.memory`); None: none is."""
        return self.memory.ceiling

    def leader(self) -> int | None:
        """The batch size the optimizer treats as best, among those the decisions may run: where its own leader
        is shut out (`memory_ceiling`), the one a decision of it runs instead (`_fitting`). None: no belief yet."""
        lead = self.engine.optimizer.leader(self.state)
        ceiling = self.memory_ceiling
        if lead is None or ceiling is None or lead < ceiling:
            return lead
        return self._fitting(Decision(lead, "exploit", ""), _Recurrence()).batch_size

    def tries(self, recurrence: int) -> int:
        """Counted (observed) tries of ``recurrence`` folded so far."""
        r = self._recurrences.get(recurrence)
        return 0 if r is None else r.tries

    @property
    def ended(self) -> int:
        """Recurrences that ended: reached the target, or failed (used up ``max_tries``)."""
        return sum(1 for r in self._recurrences.values() if r.reached or r.failed)

    def _observe(self, obs: Observation) -> None:
        self.state = self.engine.optimizer.observe(self.state, obs)
        self.observed += 1

    def _settle(self, record: TrialRecord, obs: Observation, r: _Recurrence) -> Observation:
        """What ``record``, which ends recurrence ``r``, teaches (robust rule; `zeus_run.optimizer.early_stop`).

        If it ran its epochs `SLOWDOWN` times slower than its batch size's median, the
        whole recurrence ran slow: its early stops are dropped and its own cost is taken
        at the usual pace. Otherwise its early stops are folded first, as they are.
        """
        ratio = self.pace.slowdown(record)
        pending, r.pending = r.pending, []
        if ratio > SLOWDOWN:
            self.slow[record.recurrence] = ratio
            logger.debug(
                "recurrence %d ran %.2fx slower than batch size %d's median: %d early stop(s) not charged",
                record.recurrence,
                ratio,
                record.batch_size,
                len(pending),
            )
            return dataclasses.replace(obs, cost=obs.cost / ratio, overhead=obs.overhead / ratio, slowdown=ratio)
        for p in pending:
            self._observe(p)
        return obs

    def next_recurrence(self) -> int | None:
        """The recurrence a free slot runs next: the oldest unfinished one not in flight, else a new one. A
        recurrence below the newest that never started (its trial could not start, out of file descriptors, while
        a later one's did) is unfinished too."""
        busy = {q.recurrence for q in self.in_flight.values()}
        never = [n for n in range(1, min(self._newest, self.engine.recurrences + 1)) if n not in self._recurrences]
        waiting = [n for n in [*self._open, *never] if n not in busy and n <= self.engine.recurrences]
        if waiting:
            return min(waiting)
        return self._newest + 1 if self._newest < self.engine.recurrences else None

    def start(self, recurrence: int, horizon: Horizon | None = None) -> TrialRequest:
        """Decide the next try of ``recurrence`` and count it as in flight.

        Args:
            recurrence: The recurrence (`next_recurrence`: not one that ended).
            horizon: What the optimizer plans over, if not its own (an audit re-derives each
                decision under the horizon its record says it was taken under).
        """
        r = self._recurrence(recurrence)
        self._open.add(recurrence)
        draw = self._free_draw()
        opt = self._planning(horizon)
        decision, threshold, probe = self._decide(opt, r, draw)
        request = TrialRequest(
            recurrence,
            r.attempt,
            self.started,
            self.observed,
            decision,
            threshold,
            seen=self.folded,
            in_flight=tuple(sorted(self.in_flight)) if self.in_flight else (),
            draw=draw,
            probe=probe,
            horizon=opt.horizon,
            curve_stop=opt.early_stop.curve and math.isfinite(threshold),
            lifetime=opt.lifetime if opt.horizon is None and opt.lifetime != DEFAULT_LIFETIME else None,
        )
        self.in_flight[request.trial] = request
        self.started += 1
        return request

    def _planning(self, horizon: Horizon | None) -> BatchSizeOptimizer:
        """The engine's optimizer, planning over ``horizon`` (None: its own)."""
        opt = self.engine.optimizer
        if horizon is None or (horizon.recurrences, horizon.lifetime) == (opt.horizon, opt.lifetime):
            return opt
        planned = self._planned.get(horizon)
        if planned is None:
            planned = self._planned[horizon] = opt.with_horizon(horizon.recurrences, horizon.lifetime)
        return planned

    def _recurrence(self, n: int) -> _Recurrence:
        if n > self._newest:
            self._newest = n
        r = self._recurrences.get(n)
        if r is None:
            r = self._recurrences[n] = _Recurrence()
        return r

    def _free_draw(self) -> int:
        """The smallest draw index no in-flight decision at the current observation count holds."""
        if not self.in_flight:
            return 0
        taken = {q.draw for q in self.in_flight.values() if q.observed == self.observed}
        return next(d for d in range(len(taken) + 1) if d not in taken)

    def _decide(self, opt: BatchSizeOptimizer, r: _Recurrence, draw: int) -> tuple[Decision, float, bool]:
        """The decision, its cost threshold, and whether it is pruning's probe."""
        eng = self.engine
        control = self._control(opt, r)
        if control is not None:  # consulted before the optimizer: the default again, run to its end
            return Decision(opt.default_batch_size, CONTROL, control), math.inf, False
        choice = opt.decide(self.state, draw)
        expecting = choice.batch_size if choice.stage == "pruning" else None
        waiting = next((q for q in self.in_flight.values() if q.probe), None) if self.in_flight else None
        rule = opt.early_stop
        fallback_after = rule.fallback_after(eng.max_early_stops)
        if fallback_after is not None and r.early_stops >= fallback_after:
            leader = opt.leader(self.state) if rule.robust else None  # the robust rule's fallback
            decision = Decision(
                leader if leader is not None else best_known(self.converged, opt.default_batch_size),
                "fallback",
                f"{r.early_stops} early stops in this recurrence: the best known batch size, without a cost threshold",
            )
        elif expecting is not None and waiting is not None:
            bs = best_known(self.converged, opt.default_batch_size)
            decision = Decision(
                bs,
                "pruning",
                f"concurrent: pruning waits for batch size {waiting.decision.batch_size} (trial #{waiting.trial}); "
                "the best known batch size",
            )
            logger.debug("trial %d: %s -> batch size %d", self.started, decision.detail, bs)
        else:
            decision = choice
        decision = self._fitting(decision, r)
        probe = waiting is None and decision.batch_size == expecting
        if decision.stage == "fallback":
            return decision, math.inf, probe
        return decision, rule.threshold(eng.beta, self.min_cost, decision.batch_size, self.converged), probe

    def _control(self, opt: BatchSizeOptimizer, r: _Recurrence) -> str | None:
        """Why this recurrence re-runs the default as a control (`zeus_run.engine.control`), or None.

        Only a recurrence's first try with nothing else in flight, on a job whose default fits (no memory ceiling
        at or below it), and with the spec's ``saving.control`` set.
        """
        share = self.engine.control_share
        if not share or r.tries or r.attempt > 1 or self.in_flight:
            return None
        b0 = opt.default_batch_size
        if self.memory_ceiling is not None and b0 >= self.memory_ceiling:
            return None
        left = None if opt.horizon is None else opt.horizon - (self._newest - 1)
        return control(self.records, b0, share, left)

    def _fitting(self, decision: Decision, r: _Recurrence) -> Decision:
        """``decision``, or a smaller batch size where it is at least one that ran out of memory: in this
        recurrence (its retry), or on this job (`memory_ceiling`).

        The smaller one is the cheapest that converged below the ceiling, else the largest allowed below it
        (one step down). Where none is smaller (the smallest ran out of memory), the smallest runs again, never a
        larger one.
        """
        ceilings = [c for c in (self.memory_ceiling, r.ceiling) if c is not None]
        ceiling = min(ceilings) if ceilings else None
        if ceiling is None or decision.batch_size < ceiling:
            return decision
        below = [b for b in self.engine.optimizer.batch_sizes if b < ceiling]
        if not below:  # the smallest ran out of memory: never a larger one (it needs more), the smallest again
            if decision.batch_size == ceiling:
                return decision
            return Decision(
                ceiling,
                decision.stage,
                f"batch size {decision.batch_size} is larger than {ceiling}, the smallest allowed, which ran out of "
                + ("memory in this recurrence" if ceiling == r.ceiling else "memory on this job")
                + f": batch size {ceiling} again",
            )
        fitted = {b: v for b, v in self.converged.items() if b < ceiling}
        bs = min(fitted, key=lambda b: fitted[b][0] / fitted[b][1]) if fitted else max(below)
        return Decision(
            bs,
            decision.stage,
            f"batch size {decision.batch_size} is at least {ceiling}, which ran out of memory"
            + (" in this recurrence" if ceiling == r.ceiling else f" on this job{self._until(ceiling)}")
            + f": batch size {bs} instead",
        )

    def _until(self, ceiling: int) -> str:
        """`` (shut out since recurrence 9, 3 more recurrence(s) with a model to go)``."""
        ban = self.memory.bans.get(ceiling)
        if ban is None:
            return ""
        left = ban.left(self.memory.reached)
        more = "for good" if left is None else f"{left} more recurrence(s) with a model to go"
        return f" (shut out since recurrence {ban.since}, {more})"
