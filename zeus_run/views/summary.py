"""Summaries of a history: what a user comes to `zeus-run history` for.

Everything here is a pure function of the trial records (real, simulated or
replayed alike), so the CLI only renders and tests call these directly:

* `recurrence_rows` (`zeus_run.views.rows`): one row per recurrence, its tries taken together;
* `batch_size_stats`: per batch size, trials, converged runs, mean and spread
  of the cost, epochs, time and energy;
* `exploration_status`: whether the optimizer is still exploring;
* `steady_state`: what a recurrence costs now that exploration is over, against the
  default's (what zeus-run saves per run from now on, hidden in the whole history while young);
* `recommend` (`zeus_run.views.recommend`): the setting to use (batch size, learning rate, power limit);
* `summarize`: all of it, plus totals and savings against always running the default
  (`zeus_run.views.baseline`: the default batch size at the default power limit), each with
  its 90% interval (`zeus_run.views.saving`, the one estimator).

One rule for slow recurrences (`zeus_run.optimizer.early_stop`; `Summary.slow` lists them): out of
every *mean* (they say nothing about a batch size), in every *total* and the whole history's saving,
against the default run as slow only as far as the evidence shows the machine was slow
(`zeus_run.views.nights`, the one accounting of each night).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from zeus_run.contract import StopReason
from zeus_run.engine.memory import ShutOut, shut_out
from zeus_run.records import TrialRecord
from zeus_run.views import saving as est
from zeus_run.views.baseline import Baseline
from zeus_run.views.evidence import (
    CONTROL_STAGE,
    QUANTITIES,
    Evidence,
    Spread,
    baseline_of,
    default_of,
    history_savings,
    totals,
    value_of,
    window_mean,
    with_interval,
    without_slow,
)
from zeus_run.views.nights import Kind, Night, charges
from zeus_run.views.provenance import provenance
from zeus_run.views.recommend import Belief, Recommendation, recommend
from zeus_run.views.rows import RecurrenceRow, recurrence_rows
from zeus_run.views.rows import failure_reason as failure_reason  # where callers have imported it from

if TYPE_CHECKING:
    from zeus_run.objective import Objective
    from zeus_run.records import PowerLimitMeasurement

#: Recurrences in the steady-state figure (the most recent ones after exploration).
STEADY_WINDOW = 5

#: Optimizer stages that are exploration (the rest, ``thompson`` and ``exploit``, is exploitation).
EXPLORING_STAGES = ("pruning", "explore")


@dataclass(frozen=True)
class BatchSizeStats:
    """What the history knows about one batch size.

    Attributes:
        batch_size: The batch size.
        trials: Every try run with it (failed, interrupted, slow ones included: they sum to the history's trials).
        converged: Trials in its means that reached the target.
        mean_cost: Mean cost of the converged trials (unit: J), None if none converged.
        std_cost: Sample standard deviation of those costs (unit: J), None below two.
        mean_epochs: Mean epochs of the converged trials.
        mean_time: Mean time of the converged trials (unit: s).
        mean_energy: Mean energy of the converged trials (unit: J).
        learning_rate: Learning rate it ran with (the latest trial's), if any.
        power_limit: Power limit of its latest converged trial (unit: W), if one was set.
        left_out: Tries out of its means: not observed (interrupted, environment, spec or
            infrastructure errors) or in a slow recurrence.
    """

    batch_size: int
    trials: int
    converged: int
    mean_cost: float | None
    std_cost: float | None
    mean_epochs: float | None
    mean_time: float | None
    mean_energy: float | None
    learning_rate: float | None = None
    power_limit: float | None = None
    left_out: int = 0

    @property
    def counted(self) -> int:
        """Tries its means and its ``converged`` count are taken over (``trials - left_out``)."""
        return self.trials - self.left_out


@dataclass(frozen=True)
class ExplorationStatus:
    """Whether the optimizer still explores.

    Attributes:
        exploring: True while the latest trial came from pruning or an arm's
            first explorations; the figures then include exploration's cost.
        stage: Stage of the latest trial (None for an empty history).
        ended_after: Last recurrence that explored, once exploration is over.
        recurrences: Recurrences in the history (converged or not).
    """

    exploring: bool
    stage: str | None
    ended_after: int | None
    recurrences: int


@dataclass(frozen=True)
class SteadyState:
    """What a recurrence costs now that exploration is over, against the default.

    The last recurrences after exploration (at most `STEADY_WINDOW`, slow ones left out) say
    which batch sizes and limits the job now runs; each costs its mean over its converged runs
    (outside slow recurrences, without a first run's sweep), so the figure is the expected cost of
    a recurrence from now on, not the luck of the last few.

    Attributes:
        recurrences: How many recurrences the window covers.
        first: First recurrence covered. last: Last recurrence covered.
        mean_cost: Expected cost of a recurrence at the window's batch sizes (unit: J).
        savings: ``1 - mean_cost / default_mean_cost`` (None without a default mean).
        batch_sizes: Batch size each covered recurrence converged with.
        skipped: Slow recurrences in that span left out of the window.
        savings_ci: The 90% interval of ``savings`` (None: unbounded yet).
        saved: Cost, energy and time savings with their intervals (`zeus_run.views.saving.Saved`).
    """

    recurrences: int
    first: int
    last: int
    mean_cost: float
    savings: float | None
    batch_sizes: tuple[int, ...] = ()
    skipped: int = 0
    savings_ci: tuple[float, float] | None = None
    saved: dict[str, est.Saved | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Summary:
    """Totals of a history.

    Attributes:
        trials: Number of trial records.
        recurrences: Recurrences that converged.
        total_time, total_energy, total_cost: Sums over all trials (units: s, J, J).
        best_batch_size: Batch size with the lowest mean cost among converged trials.
        default_batch_size: b0, if known.
        default_mean_cost/energy/time: A recurrence as the job ran before zeus-run (`baseline`: b0
            at the default power limit, over b0's converged runs outside slow recurrences).
        default_runs: How many converged runs of b0 those means rest on.
        baseline_cost/energy/time: The default's side: what always running the default would be
            expected to cost over the same recurrences (`zeus_run.views.nights`: its mean for each
            recurrence that reached the target, times the machine's slowdown where two batch sizes
            or more show one; plus the tries counted on both sides).
        compared_cost/energy/time: What every try cost: the totals the savings compare (units: J, J, s).
        savings_cost/energy/time: ``1 - compared / baseline`` (None without a baseline).
        savings_cost_ci/energy_ci/time_ci: Their 90% intervals (None: unbounded yet).
        saved: The same savings as `zeus_run.views.saving.Saved` (interval, hint), by quantity.
        spread: The run-to-run spread the intervals rest on (`zeus_run.views.saving.Spread`).
        compared_recurrences: Recurrences the default's side holds a run of: those that reached the target.
        baseline: The `Baseline` itself (None before b0 converged).
        estimated: Whether energy figures are estimates: a trial's energy is an estimate whole (no GPU measured).
        estimated_trials: Trials whose energy is an estimate whole (no GPU measured).
        estimated_part: Energy estimated inside measured trials (a start-up the process could not read, its
            labelled ``estimated_energy``): measured trials with an estimated part, not estimates (unit: J).
        chosen: Batch size of the final trial of each recurrence a batch size ran in, failed ones
            included (``chosen_reached`` tells them), in order.
        interrupted: Trials cut short by the launcher's own interruption.
        recurrence_costs: Cost of each recurrence, all tries included (unit: J), in order.
        by_batch_size: `BatchSizeStats` of every batch size tried, ascending.
        exploration: `ExplorationStatus`.
        steady: `SteadyState`, None while exploring or before a recurrence after it.
        recommendation: `Recommendation`, None before anything converged.
        slow: Recurrences that ran slow across the board, not charged to a batch size
            (recurrence -> slowdown; `zeus_run.optimizer.early_stop`), when the optimizer's belief was given.
        provenance: Distinct values of each `PROVENANCE_FIELDS` field the records carry.
        after_time, after_energy: Time and energy the scripts spent after the point they were
            judged at (saving a model, winding down); not part of the totals or the cost (units: s, J).
        sweeps: Trials that completed a power-limit sweep and priced it (``profile_overhead``).
        sweep_cost: What those sweeps cost beyond the same work at the limits they chose (unit: J;
            part of ``total_cost``).
        all_recurrences: Every recurrence in the history (converged, failed or lost): what every view counts.
        failed_recurrences: Recurrences in which a batch size ran and none reached the target (no model).
        lost_recurrences: Recurrences in which no batch size ran (only environment, spec or
            infrastructure errors, or interruptions).
        chosen_reached: For each of ``chosen``, whether its recurrence reached the target.
        chosen_recurrences: The recurrence of each of ``chosen``.
        nights: Each recurrence as the comparison with the default counts it (`zeus_run.views.nights`).
        shut_out: The batch sizes out-of-memory crashes shut out of the decisions now, each with every larger
            one (`zeus_run.engine.memory`, the rule the decisions obey): never recommended.
        saved_without_slow: The whole history's savings with the slow recurrences left out of both sides.
        slow_left_out: The recurrences ``saved_without_slow`` leaves out.
    """

    trials: int
    recurrences: int
    total_time: float
    total_energy: float
    total_cost: float
    best_batch_size: int | None
    default_batch_size: int | None
    default_mean_cost: float | None = None
    default_mean_energy: float | None = None
    default_mean_time: float | None = None
    default_runs: int = 0
    baseline_cost: float | None = None
    baseline_energy: float | None = None
    baseline_time: float | None = None
    savings_cost: float | None = None
    savings_energy: float | None = None
    savings_time: float | None = None
    compared_cost: float = 0.0
    compared_energy: float = 0.0
    compared_time: float = 0.0
    savings_cost_ci: tuple[float, float] | None = None
    savings_energy_ci: tuple[float, float] | None = None
    savings_time_ci: tuple[float, float] | None = None
    saved: dict[str, est.Saved | None] = field(default_factory=dict)
    spread: Spread = field(default_factory=Spread)
    compared_recurrences: int = 0
    baseline: Baseline | None = None
    estimated: bool = False
    estimated_trials: int = 0
    estimated_part: float = 0.0
    chosen: tuple[int, ...] = field(default_factory=tuple)
    interrupted: int = 0
    recurrence_costs: tuple[float, ...] = ()
    by_batch_size: tuple[BatchSizeStats, ...] = ()
    exploration: ExplorationStatus | None = None
    steady: SteadyState | None = None
    recommendation: Recommendation | None = None
    provenance: dict[str, tuple[str, ...]] = field(default_factory=dict)
    after_time: float = 0.0
    after_energy: float = 0.0
    slow: dict[int, float] = field(default_factory=dict)
    sweeps: int = 0
    sweep_cost: float = 0.0
    all_recurrences: int = 0
    failed_recurrences: int = 0
    lost_recurrences: int = 0
    chosen_reached: tuple[bool, ...] = ()
    chosen_recurrences: tuple[int, ...] = ()
    nights: tuple[Night, ...] = ()
    saved_without_slow: dict[str, est.Saved | None] = field(default_factory=dict)
    slow_left_out: tuple[int, ...] = ()
    shut_out: tuple[ShutOut, ...] = ()

    def shut_out_of(self, batch_size: int) -> ShutOut | None:
        """The shut-out that keeps ``batch_size`` out of the decisions (None: the decisions may run it)."""
        return max((x for x in self.shut_out if x.batch_size <= batch_size), key=lambda x: x.batch_size, default=None)

    @property
    def counted(self) -> str:
        """``N recurrences, M trials``: how every view names what the history holds (failed nights included)."""
        rec = "1 recurrence" if self.all_recurrences == 1 else f"{self.all_recurrences} recurrences"
        return f"{rec}, {'1 trial' if self.trials == 1 else f'{self.trials} trials'}"

    @property
    def charged_slow(self) -> dict[int, float]:
        """Nights whose slowdown the default is charged (the evidence: `zeus_run.views.nights`)."""
        return {n.recurrence: n.slowdown for n in self.nights if n.kind is Kind.SLOW}


def batch_size_stats(records: Sequence[TrialRecord], slow: Collection[int] = ()) -> list[BatchSizeStats]:
    """Per batch size tried, ascending: trials, converged runs, and their means and spread.

    Every try counts in ``trials``; trials not observed, and trials of the recurrences in ``slow``,
    are left out of the rest (``left_out`` says how many).
    """
    by_bs: dict[int, list[TrialRecord]] = defaultdict(list)
    every: dict[int, int] = defaultdict(int)
    for r in records:
        every[r.batch_size] += 1
        if r.stop_reason.observed and r.observed and r.recurrence not in slow:
            by_bs[r.batch_size].append(r)
    out = []
    for bs in sorted(every):
        rs = by_bs.get(bs, [])
        ok = [r for r in rs if r.reached]
        limits = [r.power_limit for r in ok if r.power_limit is not None]
        lrs = [r.learning_rate for r in rs if r.learning_rate is not None]
        out.append(
            BatchSizeStats(
                batch_size=bs,
                trials=every[bs],
                left_out=every[bs] - len(rs),
                converged=len(ok),
                mean_cost=_mean([r.cost for r in ok]),
                std_cost=_std([r.cost for r in ok]),
                mean_epochs=_mean([float(r.epochs) for r in ok]),
                mean_time=_mean([r.time for r in ok]),
                mean_energy=_mean([r.energy for r in ok]),
                learning_rate=lrs[-1] if lrs else None,
                power_limit=limits[-1] if limits else None,
            )
        )
    return out


def exploration_status(records: Sequence[TrialRecord]) -> ExplorationStatus:
    """Whether the optimizer is still exploring, from the stages of the trials."""
    counted = [r for r in records if r.stop_reason.observed]
    n_rec = max((r.recurrence for r in records), default=0)
    if not counted:
        return ExplorationStatus(exploring=True, stage=None, ended_after=None, recurrences=n_rec)
    stage = counted[-1].stage
    if stage in EXPLORING_STAGES:
        return ExplorationStatus(exploring=True, stage=stage, ended_after=None, recurrences=n_rec)
    explored = [r.recurrence for r in counted if r.stage in EXPLORING_STAGES]
    return ExplorationStatus(
        exploring=False, stage=stage, ended_after=max(explored) if explored else 0, recurrences=n_rec
    )


def steady_state(
    rows: Sequence[RecurrenceRow],
    exploration: ExplorationStatus,
    evidence: Evidence | None,
    window: int = STEADY_WINDOW,
    slow: Collection[int] = (),
) -> SteadyState | None:
    """What a recurrence costs at the batch sizes the last ``window`` recurrences after exploration converged with.

    Recurrences in ``slow`` (the whole machine ran slow: `zeus_run.optimizer.early_stop`) are left out
    of the window, unless every recurrence after exploration was slow; either way each batch size
    costs its mean outside slow recurrences (`SteadyState`).

    Args:
        rows: The recurrences.
        exploration: Whether exploration is over.
        evidence: The history's groups and default (`zeus_run.views.saving.Evidence`); None: no
            saving, the mean of the window's own costs.
        window: Recurrences in the window.
        slow: Slow recurrences.

    Returns:
        None while exploring, or before a recurrence converged after exploration.
    """
    if exploration.exploring or exploration.ended_after is None:
        return None
    after = [  # a control run of the default (`zeus_run.engine.control`) is not what the job now runs
        row for row in rows if row.reached and row.recurrence > exploration.ended_after and row.stage != CONTROL_STAGE
    ]
    quiet = [row for row in after if row.recurrence not in slow] or after
    recent = quiet[-window:]
    if not recent:
        return None
    skipped = sum(row.recurrence in slow for row in after if row.recurrence >= recent[0].recurrence)
    keys = [(row.final_batch_size, row.power_limit) for row in recent]
    saved = {q: evidence.rate(keys, q) for q in QUANTITIES} if evidence is not None else {}
    cost = saved.get("cost")
    mean = cost.spent if cost is not None else window_mean(recent, evidence)
    return SteadyState(
        recurrences=len(recent),
        first=recent[0].recurrence,
        last=recent[-1].recurrence,
        mean_cost=mean,
        savings=cost.value if cost is not None else None,
        batch_sizes=tuple(row.final_batch_size for row in recent),
        skipped=skipped if quiet is not after else 0,
        savings_ci=cost.ci if cost is not None else None,
        saved=saved,
    )


def summarize(
    records: Sequence[TrialRecord],
    default_batch_size: int | None = None,
    steady_window: int = STEADY_WINDOW,
    belief: Belief | None = None,
    objective: Objective | None = None,
    profile: Sequence[PowerLimitMeasurement] = (),
) -> Summary:
    """Totals, per-batch-size statistics, exploration, steady state, recommendation and savings.

    Args:
        records: The history.
        default_batch_size: b0; when None, the batch size of the first trial
            (zeus-run always starts there).
        steady_window: Recurrences in the steady-state figure.
        belief: What the optimizer favours and which recurrences ran slow
            (`zeus_run.views.recommend.believed_best`), if known.
        objective: What the job's cost charges (`baseline` re-costs b0's runs scaled to the max limit).
        profile: b0's power profile (`baseline`; empty: b0's runs as they ran).
    """
    if default_batch_size is None and records:
        default_batch_size = records[0].batch_size
    slow = dict(belief.slow) if belief else {}
    rows = recurrence_rows(records)
    stats = batch_size_stats(records, slow)
    converged_rows = [row for row in rows if row.reached]
    evidence = Evidence.of(records, default_batch_size, objective=objective, profile=profile, slow=slow)
    base = baseline_of(records, default_batch_size, objective, profile, slow, evidence)
    spent = totals(records)
    nights = charges(records, default_batch_size, slow, base.cost if base else None)
    whole = history_savings(records, evidence, base, slow, nights)
    quiet = without_slow(nights, slow)
    left_out = tuple(n.recurrence for n in nights if n not in quiet)
    calm = history_savings(records, evidence, base, slow, quiet) if left_out else {}
    ran_rows = [row for row in rows if any(StopReason(o).observed for o in row.outcomes)]
    with_cost = [s for s in stats if s.mean_cost is not None]
    best = min(with_cost, key=lambda s: s.mean_cost or 0.0).batch_size if with_cost else None
    exploration = exploration_status(records)
    bans = shut_out(records).now()  # the rule the decisions obey: never recommend what they exclude
    rec = recommend(stats, base.cost if base else None, default_batch_size, belief.batch_size if belief else None, bans)
    saved = {q: whole.get(q) for q in QUANTITIES}
    return Summary(
        trials=len(records),
        recurrences=len(converged_rows),
        total_time=spent["time"],
        total_energy=spent["energy"],
        total_cost=spent["cost"],
        best_batch_size=best,
        default_batch_size=default_batch_size,
        default_mean_cost=base.cost if base else None,
        default_mean_energy=base.energy if base else None,
        default_mean_time=base.time if base else None,
        default_runs=base.runs if base else 0,
        baseline_cost=default_of(saved["cost"]),
        baseline_energy=default_of(saved["energy"]),
        baseline_time=default_of(saved["time"]),
        savings_cost=value_of(saved["cost"]),
        savings_energy=value_of(saved["energy"]),
        savings_time=value_of(saved["time"]),
        compared_cost=spent["cost"],
        compared_energy=spent["energy"],
        compared_time=spent["time"],
        savings_cost_ci=saved["cost"].ci if saved["cost"] else None,
        savings_energy_ci=saved["energy"].ci if saved["energy"] else None,
        savings_time_ci=saved["time"].ci if saved["time"] else None,
        saved=saved,
        spread=evidence.spread,
        compared_recurrences=sum(1 for n in nights if n.compared),
        baseline=base,
        estimated=any(whole_estimate(r) for r in records),
        estimated_trials=sum(1 for r in records if whole_estimate(r)),
        estimated_part=sum(r.estimated_joules for r in records if not whole_estimate(r)),
        chosen=tuple(row.final_batch_size for row in ran_rows),
        chosen_reached=tuple(row.reached for row in ran_rows),
        chosen_recurrences=tuple(row.recurrence for row in ran_rows),
        all_recurrences=len(rows),
        failed_recurrences=sum(1 for n in nights if n.kind is Kind.FAILED),
        lost_recurrences=sum(1 for n in nights if n.kind is Kind.LOST),
        nights=tuple(nights),
        saved_without_slow={q: calm.get(q) for q in QUANTITIES} if calm else {},
        slow_left_out=left_out,
        interrupted=sum(1 for r in records if r.stop_reason is StopReason.INTERRUPTED),
        recurrence_costs=tuple(row.cost for row in rows),
        by_batch_size=tuple(stats),
        exploration=exploration,
        steady=steady_state(rows, exploration, evidence if base else None, steady_window, slow),
        recommendation=with_interval(rec, evidence) if base else rec,
        provenance=provenance(records),
        after_time=sum(r.after_time or 0.0 for r in records),
        after_energy=sum(r.after_energy or 0.0 for r in records),
        slow=slow,
        sweeps=sum(1 for r in records if r.profile_overhead is not None),
        sweep_cost=sum(r.profile_overhead or 0.0 for r in records),
        shut_out=bans,
    )


def whole_estimate(r: TrialRecord) -> bool:
    """Whether ``r``'s energy is an estimate whole (no GPU measured), not a measurement with an estimated part (its
    start-up: ``estimated_energy``)."""
    return r.estimated and r.estimated_energy is None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _std(values: Sequence[float]) -> float | None:
    """Sample standard deviation (n - 1), None below two values."""
    if len(values) < 2:
        return None
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))
