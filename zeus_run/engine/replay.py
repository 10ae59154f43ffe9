"""Replay a recorded run: audit its decisions, or ask what other knobs would have done.

Both re-drive the shared `Engine` from the history alone:

* `audit` re-derives each recorded decision from the records it had seen (all
  before it in a serial run; ``seen`` of them, with the recorded trials in
  flight, in a concurrent one) and checks that the engine asks for exactly what
  was recorded (recurrence, try, batch size, early-stop threshold; draw and
  probe when concurrent). The first difference is a divergence.
* `what_if` turns the recorded trials into an empirical trace (per batch size:
  each observed trial's epochs, time and energy) and replays it with changed
  knobs. A recorded out-of-memory crash replays as one, under the rule the
  decisions obey (`zeus_run.engine.memory`: its retry goes smaller, and its
  batch size is shut out as long as the run's ``oom_retry_after`` says). A batch size the history never observed is unknown: the replay stops
  there and says so rather than inventing an outcome.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from zeus_run.contract import StopReason, TrialOutcome, reaches_target
from zeus_run.cost import SKIP_PENALTY, epochs_under_threshold
from zeus_run.engine.concurrent import Clocked
from zeus_run.engine.core import Executor, TrialRequest
from zeus_run.engine.knobs import Knobs
from zeus_run.engine.ledger import Ledger
from zeus_run.engine.record import Measurement, trial_record
from zeus_run.engine.request import Horizon
from zeus_run.errors import ConvergenceError
from zeus_run.records import TrialRecord
from zeus_run.spec import POLICY_DEFAULTS, OptimizerSettings

logger = logging.getLogger(__name__)


# -- audit ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Divergence:
    """The first place a replay disagrees with the record.

    Attributes:
        trial: Index of the record.
        what: The field that differs.
        recorded: Value in the history.
        replayed: Value the replayed optimizer produced.
    """

    trial: int
    what: str
    recorded: Any
    replayed: Any

    def describe(self) -> str:
        return f"trial #{self.trial}: {self.what} recorded {self.recorded!r}, replay gives {self.replayed!r}"


@dataclass(frozen=True)
class AuditResult:
    """Outcome of `audit`: how many records matched, and the first divergence if any."""

    checked: int
    divergence: Divergence | None


def audit(records: Sequence[TrialRecord], knobs: Knobs, in_flight: Sequence[TrialRecord] = ()) -> AuditResult:
    """Check that re-folding the history reproduces every recorded decision.

    A `zeus_run.engine.core.Ledger` is driven through the history: decisions are
    re-derived in the order their trials started, each after folding the
    records it had seen (``seen``; a record without it, as serial runs write,
    saw every record before it), with the trials then in flight. The engine's
    choice of recurrence, try, batch size and threshold must match the record,
    and for a concurrent record also its trial number, the trials in flight,
    the draw and the probe flag. A record must not have seen itself or less than
    the decision before it, and a trial cannot end before it started.

    Each decision is re-derived under the horizon its record says it was taken under
    (`zeus_run.engine.request.Horizon.of`: the job's ``recurrences``, or an open-ended job's
    ``lifetime``), whichever door took it. The audit goes on past a record that stopped the
    run (the first recurrence not converging at the default batch size): the same command,
    resumed once the cause is fixed, decides on the same folded history. A recurrence that
    used up ``max_tries`` is over (its last try says so; one recorded before that counts its
    tries against ``knobs.max_tries``), and the next decision starts the next recurrence.

    Args:
        records: The history, in the order its records were folded.
        knobs: The settings it was recorded under.
        in_flight: Trials still in flight when the history was read (``running.json``: a
            resumed launcher adopted them, or one is running), as records of their decision
            (`zeus_run.rundir.resume.pending_records`). Their decisions are checked too, in start
            order, but they are never folded: the history has no outcome of theirs yet.
    """
    everything = [*records, *in_flight]
    ledger = Ledger(knobs.engine(max((r.recurrence for r in everything), default=0) + 1))
    order = sorted(range(len(everything)), key=lambda p: _started(everything[p], p))
    ended = {_started(r, p) for p, r in enumerate(everything)}
    never_started: set[int] = set()
    checked = 0
    for p in order:
        rec = everything[p]
        place = min(p, len(records))  # a trial in flight has no place in the history yet
        seen = place if rec.seen is None else rec.seen
        if not ledger.folded <= seen <= place:
            return AuditResult(checked, Divergence(p, "records seen", seen, f"{ledger.folded} to {place}"))
        while ledger.folded < seen:
            q = ledger.folded
            if _started(records[q], q) not in ledger.in_flight:
                return AuditResult(
                    checked, Divergence(q, "end order", f"trial {_started(records[q], q)} ended", "it had not started")
                )
            ledger.fold(records[q], _started(records[q], q))
        for t in [t for t in never_started if t not in (rec.in_flight or ())]:  # a later launcher never saw it
            ledger.in_flight.pop(t, None)
            never_started.discard(t)
        req = ledger.engine.ask(ledger, Horizon.of(rec))  # the decision path's ask, under the record's horizon
        assert req is not None  # the limit is past every recorded recurrence
        while (
            rec.seen is not None
            and req.trial < rec.trial
            and req.trial in (rec.in_flight or ())
            and req.trial not in ended
        ):
            # A trial decided and never started (out of file descriptors, say), so never recorded: the decisions
            # after it counted it in flight, as it was, until a later launcher started its recurrence again.
            never_started.add(req.trial)
            req = ledger.engine.ask(ledger, Horizon.of(rec))
            assert req is not None
        diff = _difference(rec, req)
        if diff is not None:
            return AuditResult(checked, Divergence(p, *diff))
        checked += 1
    return AuditResult(checked, None)


def _started(record: TrialRecord, position: int) -> int:
    """The trial's place in start order: its ``trial`` in a concurrent record, else its position (serial)."""
    return position if record.seen is None else record.trial


def _difference(rec: TrialRecord, req: TrialRequest) -> tuple[str, Any, Any] | None:
    """The first field where the recorded trial differs from the replayed request: (what, recorded, replayed)."""
    if (
        rec.seen is None  # serial: the usual case is an exact match, checked at once
        and (rec.recurrence, rec.attempt, rec.batch_size) == (req.recurrence, req.attempt, req.decision.batch_size)
        and (
            rec.cost_threshold == req.cost_threshold or (rec.cost_threshold is None and req.cost_threshold == math.inf)
        )
    ):
        return None
    pairs: list[tuple[str, Any, Any]] = [
        ("recurrence", rec.recurrence, req.recurrence),
        ("try", rec.attempt, req.attempt),
        ("batch size", rec.batch_size, req.decision.batch_size),
        ("cost threshold", _thr(rec.cost_threshold), _thr(req.cost_threshold)),
    ]
    if rec.seen is not None:
        pairs += [
            ("trial", rec.trial, req.trial),
            ("trials in flight", rec.in_flight, req.in_flight),
            ("draw", rec.draw, req.draw),
            ("probe", rec.probe, req.probe),
        ]
    for what, recorded, replayed in pairs:
        same = math.isclose(recorded, replayed, rel_tol=1e-9) if isinstance(recorded, float) else recorded == replayed
        if not same:
            return what, recorded, replayed
    return None


def _thr(v: float | None) -> float:
    return math.inf if v is None else float(v)


# -- what-if ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedPath:
    """One observed trial as a training path.

    Attributes:
        record: The recorded trial.
        reached_at: First epoch whose metric meets the replay's target, if any.
    """

    record: TrialRecord
    reached_at: int | None


@dataclass
class WhatIfResult:
    """What a configuration would have done on the recorded outcomes.

    Attributes:
        records: The replayed trials (kind ``replayed``).
        recurrences: Recurrences replayed to convergence.
        cost: Cumulative cost of the replay (unit: J), under the replay's eta.
        recorded_cost: Cost of the same recurrences as recorded, under the replay's eta.
        unknown: Batch size whose outcome the history cannot supply (the replay stopped there).
        unknown_reason: Why it cannot.
        stopped_at: Recurrence where it stopped early, if it did.
    """

    records: list[TrialRecord]
    recurrences: int
    cost: float
    recorded_cost: float
    unknown: int | None = None
    stopped_at: int | None = None
    unknown_reason: str | None = None


class _Unknown(Exception):
    def __init__(self, batch_size: int, recurrence: int, reason: str) -> None:
        self.batch_size = batch_size
        self.recurrence = recurrence
        self.reason = reason


def empirical_paths(records: Sequence[TrialRecord], knobs: Knobs) -> dict[int, list[RecordedPath]]:
    """Per batch size, in recorded order, the observed trials that ran (a crash before epoch 1 included)."""
    paths: dict[int, list[RecordedPath]] = defaultdict(list)
    for r in records:
        if not r.observed or (r.epochs <= 0 and not r.stop_reason.natural_end):
            continue
        hit = None
        for i, m in enumerate(r.metrics, start=1):
            if reaches_target(m, knobs.target_metric, knobs.higher_is_better):
                hit = i
                break
        if hit is None and r.reached:  # a record without metrics (e.g. simulated)
            hit = r.epochs
        paths[r.batch_size].append(RecordedPath(r, hit))
    return dict(paths)


class EmpiricalExecutor:
    """Runs trials on recorded paths (an `zeus_run.engine.core.Executor`).

    The k-th trial of a batch size replays the k-th recorded trial of it (then
    they repeat in order). Under the recorded conditions (same threshold, eta,
    target and max_epochs) a trial replays exactly as recorded. Otherwise the
    recorded path is cut by the new threshold (`zeus_run.cost.epochs_under_threshold`),
    target or max_epochs; a crash, an exit or a timeout happens again where it
    did. When the replay would run a path past the epoch where its recording
    ends (it was cut by the cost limit, or by a smaller max_epochs), the next
    recorded trial of that batch size that can answer is used; if none can,
    the outcome is unknown and the replay stops, saying why.

    Args:
        paths: `empirical_paths` of the history.
        knobs: The configuration being replayed.
        recorded: The configuration the history was recorded under (None: unknown, so
            no trial is taken to be under the recorded conditions).
    """

    def __init__(self, paths: dict[int, list[RecordedPath]], knobs: Knobs, recorded: Knobs | None = None) -> None:
        self.paths = paths
        self.knobs = knobs
        self.recorded = recorded
        self.next: dict[int, int] = defaultdict(int)

    def charge(self, energy: float, time: float, max_power: float) -> float:
        return self.knobs.goal.trial_cost(energy, time, max_power)  # the engine adds max-slowdown's penalty

    def __call__(self, req: TrialRequest) -> TrialRecord:
        bs = req.decision.batch_size
        options = self.paths.get(bs)
        if not options:
            raise _Unknown(bs, req.recurrence, f"batch size {bs} was never observed in the history")
        start = self.next[bs] % len(options)
        first_reason = ""
        for k in range(len(options)):
            i = (start + k) % len(options)
            out = self._replay(options[i], req)
            if isinstance(out, TrialRecord):
                self.next[bs] = i + 1
                return out
            first_reason = first_reason or out
        raise _Unknown(bs, req.recurrence, first_reason)

    def _same_conditions(self, r: TrialRecord, threshold: float) -> bool:
        rk, k = self.recorded, self.knobs
        if rk is None or (rk.goal, rk.target_metric, rk.higher_is_better, rk.max_epochs) != (
            k.goal,
            k.target_metric,
            k.higher_is_better,
            k.max_epochs,
        ):
            return False
        recorded = _thr(r.cost_threshold)
        return recorded == threshold or (
            math.isfinite(recorded) and math.isclose(recorded, threshold, rel_tol=1e-12, abs_tol=0.0)
        )

    def _replay(self, path: RecordedPath, req: TrialRequest) -> TrialRecord | str:
        """The replayed trial, or why the recording cannot tell."""
        r, k = path.record, self.knobs
        T = req.cost_threshold
        if self._same_conditions(r, T):
            return self._record(req, r, r.epochs, r.time, r.energy, r.cost, r.reached, r.stop_reason)
        n = r.epochs
        cost = self.charge(r.energy, r.time, r.max_power)
        per = cost / n if n else cost
        h = path.reached_at
        stop_at, reason = (
            (h, StopReason.TARGET_REACHED)
            if h is not None and h <= k.max_epochs
            else (k.max_epochs, StopReason.MAX_EPOCHS)
        )
        if r.stop_reason.natural_end and n < stop_at:
            # The script ends by itself at epoch n (and a bit): again, unless the threshold cuts it first.
            if cost <= T:
                return self._record(req, r, n, r.time, r.energy, cost, False, r.stop_reason)
            afford, _ = epochs_under_threshold(T, per, n)
            return self._cut(req, r, afford)
        afford, cut = epochs_under_threshold(T, per, stop_at)
        if cut and afford <= n:
            return self._cut(req, r, afford)
        if stop_at > n:
            return (
                f"batch size {r.batch_size}: its recorded trial #{r.trial} stopped at epoch {n} ({r.stop_reason}); "
                f"this replay would run it further (threshold {T:.6g} J, max_epochs {k.max_epochs}, target "
                f"{k.target_metric:g}), and what happens after epoch {n} was never observed"
            )
        if stop_at == n and r.stop_reason == reason:
            return self._record(req, r, n, r.time, r.energy, cost, reason is StopReason.TARGET_REACHED, reason)
        t, e = stop_at * r.time / n, stop_at * r.energy / n
        return self._record(
            req, r, stop_at, t, e, self.charge(e, t, r.max_power), reason is StopReason.TARGET_REACHED, reason
        )

    def _cut(self, req: TrialRequest, r: TrialRecord, epochs: int) -> TrialRecord:
        if epochs <= 0:
            return self._record(req, r, 0, 0.0, 0.0, SKIP_PENALTY * req.cost_threshold, False, StopReason.SKIPPED)
        t, e = epochs * r.time / r.epochs, epochs * r.energy / r.epochs
        return self._record(req, r, epochs, t, e, self.charge(e, t, r.max_power), False, StopReason.COST_THRESHOLD)

    def _record(
        self,
        req: TrialRequest,
        r: TrialRecord,
        epochs: int,
        time: float,
        energy: float,
        cost: float,
        reached: bool,
        reason: StopReason,
    ) -> TrialRecord:
        outcome = TrialOutcome.of(
            reason,
            epochs=epochs,
            time=time,
            energy=energy,
            max_power=r.max_power,
            cost=cost,
            reached=reached,
            metrics=r.metrics[:epochs],
            cause=None,
        )
        record = trial_record(
            "replay",
            req,
            outcome,
            Measurement("replay", r.estimated),
            kind="replayed",
            observed=True,  # replayed paths are observed ones (`empirical_paths`)
            detail=f"{req.decision.detail}; recorded trial #{r.trial}".lstrip("; "),
        )
        if r.oom and reason is StopReason.CRASHED and reason is r.stop_reason:
            # It runs out of memory again: its retry goes smaller and the job's rule shuts it out
            # (`zeus_run.engine.memory`), for as long as the recorded run's spec said.
            record = dataclasses.replace(record, oom=True)
        return record


def what_if(
    records: Sequence[TrialRecord],
    knobs: Knobs,
    recurrences: int | None = None,
    recorded: Knobs | None = None,
) -> WhatIfResult:
    """Replay ``knobs`` on the recorded outcomes.

    Args:
        records: The history.
        knobs: The configuration to evaluate (e.g. the run's knobs with another eta).
        recurrences: Recurrences to replay (default: as many as the history converged).
        recorded: The configuration the history was recorded under (`Knobs.from_run_dir`);
            with it, a replay of unchanged knobs reproduces every recorded trial exactly.
    """
    recorded_rec = sorted({r.recurrence for r in records if r.reached})
    n = recurrences if recurrences is not None else len(recorded_rec)
    empirical = EmpiricalExecutor(empirical_paths(records, knobs), knobs, recorded)
    # Overlapping recurrences end in the order of their recorded time.
    executor: Executor | Clocked = Clocked(empirical) if knobs.concurrency > 1 else empirical
    out: list[TrialRecord] = []
    unknown = stopped = reason = None
    try:
        knobs.engine(n).run([], executor, out.append)
    except _Unknown as u:
        unknown, stopped, reason = u.batch_size, u.recurrence, u.reason
        logger.info("replay stopped at recurrence %d: %s", u.recurrence, u.reason)
    except ConvergenceError as exc:
        stopped = out[-1].recurrence if out else 1
        logger.info("replay stopped: %s", exc)
    done = sorted({r.recurrence for r in out if r.reached})
    # Compare like with like: the recorded trials of the recurrences the replay completed.
    done_set = set(range(1, len(done) + 1))
    same_eta = recorded is not None and recorded.goal == knobs.goal
    recorded_cost = sum(
        r.spent_cost if same_eta else empirical.charge(r.energy, r.time, r.max_power)
        for r in records
        if r.observed and r.recurrence in done_set
    )
    cost = sum(r.spent_cost for r in out if r.recurrence in done_set)
    return WhatIfResult(out, len(done), cost, recorded_cost, unknown, stopped, reason)


def with_changes(knobs: Knobs, **changes: Any) -> Knobs:
    """A copy of ``knobs`` with top-level or optimizer fields replaced (None: unchanged).

    A new ``policy`` comes with its own defaults for the policy-dependent knobs
    (`zeus_run.spec.POLICY_DEFAULTS`) unless they are changed too.
    """
    opt_fields = {f.name for f in dataclasses.fields(OptimizerSettings)}
    top = {k: v for k, v in changes.items() if v is not None and k not in opt_fields}
    opt = {k: v for k, v in changes.items() if v is not None and k in opt_fields}
    settings = knobs.optimizer
    if opt.get("policy", settings.policy) != settings.policy:
        kept = {k: v for k, v in dataclasses.asdict(settings).items() if k not in POLICY_DEFAULTS[opt["policy"]]}
        settings = OptimizerSettings.for_policy(**{**kept, "policy": opt["policy"]})
    return dataclasses.replace(knobs, optimizer=dataclasses.replace(settings, **opt), **top)
