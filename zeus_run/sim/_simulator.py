"""Trace-driven simulation of a recurring job (its baselines: `zeus_run.sim._baselines`).

The simulator is only an *executor* for `zeus_run.engine.core.Engine`: the engine
and the batch-size optimizer are exactly those of real runs. A trial samples
one traced run (training path) of the chosen batch size, runs it at the power
limit the JIT power-limit policy picked (profiling the limits during the
first epoch of a batch size's first trial: all of them, or on a short horizon
a descending sweep that stops early, `zeus_run.optimizer.power_limit.sweep_more`), and is cut at the last epoch whose
cost stays under the early-stop threshold. The optimizer sees only the
resulting `TrialRecord`'s observation: batch size, cost paid, reached or not.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from zeus_run.contract import StopReason, TrialOutcome
from zeus_run.cost import SKIP_PENALTY, epochs_under_threshold
from zeus_run.engine.concurrent import Clocked
from zeus_run.engine.core import TrialRequest
from zeus_run.engine.knobs import Knobs
from zeus_run.engine.record import Measurement, trial_record
from zeus_run.objective import Objective
from zeus_run.optimizer import JITPowerLimitOptimizer, PowerLimitMeasurement, WarmStart
from zeus_run.optimizer.early_stop import curve_min_epochs
from zeus_run.optimizer.power_limit import recurrences_left, sweep_more, unit_cost
from zeus_run.records import TrialRecord
from zeus_run.sim._baselines import (
    Expected,
    default_baseline,
    epoch_costs,
    grid_search_cost,
    oracle_baseline,
)
from zeus_run.sim._life import IDLE_SHARE, Life, NightLife
from zeus_run.sim._lived import default_truth, fault_record, live
from zeus_run.sim._noise import Noise
from zeus_run.sim._traces import JobTable
from zeus_run.spec import DEFAULT_OOM_RETRY_AFTER, OptimizerSettings
from zeus_run.views.saving import Saved, saved_json

logger = logging.getLogger(__name__)


class TraceExecutor:
    """Runs a `TrialRequest` on the traces (an `zeus_run.engine.core.Executor`).

    Args:
        table: The job on one GPU.
        eta: Cost knob in [0, 1] (the ``cost`` objective's; ignored when ``objective`` is given).
        seed: Seed of the training-path draws (independent of the optimizer's).
        objective: What trials are charged and limits chosen by (default: ``cost`` with ``eta``).
        slowdowns: Slowdown factor of each recurrence (`zeus_run.sim.Noise`; empty: none):
            every try of recurrence ``n`` takes ``slowdowns[n - 1]`` times the time and energy.
        life: What goes wrong on each night (`zeus_run.sim.Life`; empty: nothing).
    """

    def __init__(
        self,
        table: JobTable,
        eta: float,
        seed: int,
        slowdowns: tuple[float, ...] = (),
        objective: Objective | None = None,
        life: tuple[NightLife, ...] = (),
    ) -> None:
        self.table = table
        self.life = life
        self._tries: dict[int, int] = {}
        self.objective = objective or Objective("cost", eta=eta)
        self.eta = eta = self.objective.cost_eta
        self.slowdowns = slowdowns
        self.rng = np.random.default_rng([seed, 0x5EED])
        self.plo = JITPowerLimitOptimizer(eta, table.max_power, self.objective)
        self.pl_state = self.plo.initial_state()
        tpe, pwr = table.time_per_epoch, table.avg_power
        self._epoch_cost = epoch_costs(table, eta)
        self._epoch_energy = pwr * tpe
        #: Per row profiled: (share of the first epoch spent sweeping, its energy, its time).
        self._sweep: dict[int, tuple[float, float, float]] = {}
        self._profiles = [
            [
                PowerLimitMeasurement(pl, float(pwr[i, j]), 1.0 / float(tpe[i, j]))
                for j, pl in enumerate(table.power_limits)
                if not math.isnan(tpe[i, j])
            ]
            for i in range(len(table.batch_sizes))
        ]

    def power_limit(self, row: int, recurrence: int = 1, horizon: int | None = None) -> tuple[int, bool]:
        """Column of the limit for batch-size row ``row``, and whether it had to be profiled now.

        A first trial sweeps the limits from the maximum down, as far as `sweep_more` says for
        the recurrences left; each limit's window takes ``1 / |limits|`` of the first epoch.
        """
        bs = self.table.batch_sizes[row]
        pl = self.pl_state.predict(bs)
        profiled = pl is None
        if profiled:
            full = sorted(self._profiles[row], key=lambda m: -m.power_limit)
            left = recurrences_left(recurrence, horizon)
            swept: list[PowerLimitMeasurement] = []
            while sweep_more([unit_cost(m, self.eta, self.table.max_power) for m in swept], len(full), left):
                swept.append(full[len(swept)])
            self.pl_state = self.plo.observe_profile(self.pl_state, bs, swept)
            pl = self.pl_state.predict(bs)
            energy = sum(m.avg_power / m.throughput for m in swept) / len(full)
            time = sum(1.0 / m.throughput for m in swept) / len(full)
            self._sweep[row] = (len(swept) / len(full), energy, time)
        return self.table.power_limits.index(pl), profiled

    def slowdown(self, recurrence: int) -> float:
        """Slowdown factor of ``recurrence`` (1.0 without noise or past the drawn recurrences)."""
        return self.slowdowns[recurrence - 1] if recurrence <= len(self.slowdowns) else 1.0

    def sample_path(self, row: int) -> float:
        """Target epoch of one traced run of batch-size row ``row`` (NaN: never reached)."""
        runs = self.table.target_epochs[row]
        return float(runs[self.rng.integers(len(runs))])

    def night(self, recurrence: int) -> NightLife:
        """What goes wrong on ``recurrence`` (nothing without a life or past the drawn nights)."""
        return self.life[recurrence - 1] if recurrence <= len(self.life) else NightLife()

    def __call__(self, req: TrialRequest) -> TrialRecord:
        t = self.table
        bs = req.decision.batch_size
        row = t.index(bs)
        night, k = self.night(req.recurrence), self._tries.get(req.recurrence, 0)
        self._tries[req.recurrence] = k + 1
        fault = fault_record(self, req, row, night, k == 0)
        if fault is not None:
            return fault
        col, profiled = self.power_limit(row, req.recurrence, req.horizon)
        slow = self.slowdown(req.recurrence) * night.factor(k == 0)
        stall = night.stall(k == 0)
        per_epoch = float(self._epoch_cost[row, col]) * slow
        limit, cut_by_threshold = epochs_under_threshold(req.cost_threshold, per_epoch, t.job.max_epochs)
        if limit <= 0:
            return self._record(
                req,
                col,
                epochs=0,
                time=0.0,
                energy=0.0,
                cost=SKIP_PENALTY * req.cost_threshold,
                reached=False,
                stop_reason=StopReason.SKIPPED,
                message=f"one epoch costs {per_epoch:.4g} J, over the threshold",
            )
        # A request with ``curve_stop`` may be stopped by its learning curve. The traces give each
        # run's target epoch, not its curve: a run that never reaches the target is modelled as
        # stopped as early as the rule may act, one that reaches it after its threshold as not.
        target = self.sample_path(row)
        reached = not math.isnan(target) and target <= limit
        epochs = int(target) if reached else limit
        curve_after = curve_min_epochs(t.job.max_epochs) if req.curve_stop else None
        if math.isnan(target) and curve_after is not None and curve_after < epochs:
            epochs, cut_by_threshold = curve_after, False
        energy, time = self._charge(row, col, epochs, profiled)
        energy, time = energy * slow + stall * IDLE_SHARE * t.max_power, time * slow + stall
        overhead = None  # the sweep beyond the same work at the chosen limit, as the launcher prices it
        if profiled and epochs > 0:
            steady_e, steady_t = self._charge(row, col, epochs, False)
            steady = self.objective.trial_cost(steady_e * slow, steady_t * slow, t.max_power)
            overhead = max(0.0, self.objective.trial_cost(energy, time, t.max_power) - steady)
        return self._record(
            req,
            col,
            epochs=epochs,
            time=time,
            energy=energy,
            cost=self.objective.trial_cost(energy, time, t.max_power),  # the engine adds max-slowdown's penalty
            reached=reached,
            stop_reason=self._reason(reached, cut_by_threshold, epochs, t.job.max_epochs),
            message=self._profile_message(row) if profiled else None,
            overhead=overhead,
        )

    @staticmethod
    def _reason(reached: bool, cut_by_threshold: bool, epochs: int, max_epochs: int) -> StopReason:
        if reached:
            return StopReason.TARGET_REACHED
        if cut_by_threshold:
            return StopReason.COST_THRESHOLD
        return StopReason.MAX_EPOCHS if epochs >= max_epochs else StopReason.NO_PROGRESS

    def _record(
        self,
        req: TrialRequest,
        col: int,
        *,
        epochs: int,
        time: float,
        energy: float,
        cost: float,
        reached: bool,
        stop_reason: StopReason,
        message: str | None,
        overhead: float | None = None,
        cause: str | None = None,
    ) -> TrialRecord:
        t = self.table
        outcome = TrialOutcome.of(
            stop_reason,
            epochs=epochs,
            time=time,
            energy=energy,
            max_power=t.max_power,
            cost=cost,
            reached=reached,
            cause=cause,
            power_limit=t.power_limits[col],
            profile_overhead=overhead,
        )
        return trial_record(
            t.job.name,
            req,
            outcome,
            Measurement("trace"),
            kind="simulated",
            observed=stop_reason.observed,
            message=message,
        )

    def _profile_message(self, row: int) -> str:
        share = self._sweep[row][0]
        n = round(share * len(self._profiles[row]))
        return "profiled all power limits in epoch 1" if share >= 1.0 else f"profiled {n} power limits in epoch 1"

    def _charge(self, row: int, col: int, epochs: float, profiled: bool) -> tuple[float, float]:
        """Energy (J) and time (s) of ``epochs`` epochs; the first one profiled if ``profiled``."""
        e1 = float(self._epoch_energy[row, col])
        t1 = float(self.table.time_per_epoch[row, col])
        if not profiled or epochs <= 0:
            return epochs * e1, epochs * t1
        share, energy, time = self._sweep[row]
        rest = epochs - share
        return energy + rest * e1, time + rest * t1


@dataclass
class SimResult:
    """One simulated run of a job.

    Attributes:
        table: The job on its GPU.
        policy: Batch-size policy name.
        seed: Seed.
        horizon: Recurrences simulated.
        records: Every trial.
        cost: Cumulative cost paid (unit: J).
        energy: Cumulative energy (unit: J).
        time: Cumulative time (unit: s).
        default: Default's expected per-recurrence outcome.
        oracle: Oracle's expected per-recurrence outcome.
        grid_cost: Grid search's cumulative cost on sampled paths (unit: J).
        final: The last trial's batch size and power limit.
        knobs: The settings it ran with (what its run directory's ``spec.yaml`` records).
        slowdowns: Each recurrence's slowdown factor (empty: no noise); Default and Oracle
            run under the same noise.
        life: Each night's bad luck (`zeus_run.sim.Life`; empty: none).
        truth: What the default would have spent over the same life, ``(cost, energy, time)``
            (`zeus_run.sim._life`; None without a life: ``load`` times its expected run).
    """

    table: JobTable
    policy: str
    seed: int
    horizon: int
    records: list[TrialRecord]
    cost: float
    energy: float
    time: float
    default: Expected
    oracle: Expected
    grid_cost: float = math.nan
    final: tuple[int, float | None] = field(default=(0, None))
    knobs: Knobs | None = None
    slowdowns: tuple[float, ...] = ()
    life: tuple[NightLife, ...] = ()
    truth: tuple[float, float, float] | None = None
    _saved: dict[str, Saved | None] | None = field(default=None, repr=False, compare=False)

    @property
    def load(self) -> float:
        """Recurrences weighted by their slowdown: the horizon without noise."""
        return float(sum(self.slowdowns)) if self.slowdowns else float(self.horizon)

    @property
    def default_cost(self) -> float:
        """Default's cumulative expected cost under the same noise and life (unit: J)."""
        return self.truth[0] if self.truth is not None else self.load * self.default.cost

    @property
    def default_energy(self) -> float:
        """Default's cumulative expected energy under the same noise and life (unit: J)."""
        return self.truth[1] if self.truth is not None else self.load * self.default.energy

    @property
    def default_time(self) -> float:
        """Default's cumulative expected time under the same noise and life (unit: s)."""
        return self.truth[2] if self.truth is not None else self.load * self.default.time

    @property
    def oracle_cost(self) -> float:
        """Oracle's cumulative expected cost under the same noise (unit: J)."""
        return self.load * self.oracle.cost

    @property
    def tries(self) -> list[int]:
        """Trials of each recurrence, in recurrence order."""
        counts: dict[int, int] = {}
        for r in self.records:
            counts[r.recurrence] = counts.get(r.recurrence, 0) + 1
        return [counts[k] for k in sorted(counts)]

    def saved(self) -> dict[str, Saved | None]:
        """Cost, energy and time saved, with 90% intervals, as ``history`` states them on the run directory (the
        one saving a simulation states; ``cost_vs_default``, against the traces' expected Default, checks it)."""
        from zeus_run.views.jobs import summarize_run

        if self._saved is None:
            self._saved = summarize_run(self.records, self.knobs).saved
        return self._saved

    @property
    def regret(self) -> float:
        """``cost / oracle_cost - 1``."""
        return self.cost / self.oracle_cost - 1.0

    def to_json(self) -> dict:
        """Summary as a JSON-ready dict."""
        return {
            "workload": self.table.job.name,
            "gpu": self.table.gpu,
            "policy": self.policy,
            "seed": self.seed,
            "horizon": self.horizon,
            "trials": len(self.records),
            "cost": self.cost,
            "energy": self.energy,
            "time": self.time,
            "default_cost": self.default_cost,
            "oracle_cost": self.oracle_cost,
            "grid_cost": self.grid_cost if math.isfinite(self.grid_cost) else None,
            "regret": self.regret,
            "cost_vs_default": self.cost / self.default_cost,
            "energy_vs_default": self.energy / self.default_energy,
            "time_vs_default": self.time / self.default_time,
            **saved_json(self.saved()),
            "oracle": {"batch_size": self.oracle.batch_size, "power_limit": self.oracle.power_limit},
            "final_batch_size": self.final[0],
            "final_power_limit": self.final[1],
        }


def paper_horizon(table: JobTable) -> int:
    """``2 x |batch sizes| x |power limits|``."""
    return table.horizon


def simulate(
    table: JobTable,
    *,
    eta: float = 0.5,
    beta: float | None = 2.0,
    seed: int = 1,
    horizon: int | None = None,
    settings: OptimizerSettings | None = None,
    max_tries: int = 20,
    baselines: bool = True,
    on_record: Callable[[TrialRecord], None] = lambda r: None,
    max_early_stops: int | None = None,
    concurrency: int = 1,
    noise: Noise | None = None,
    plan_horizon: bool = True,
    objective: Objective | None = None,
    warm: WarmStart | None = None,
    life: Life | None = None,
    oom_retry_after: int | None = DEFAULT_OOM_RETRY_AFTER,
    control: float | None = None,
) -> SimResult:
    """Replay a recurring job on traces with the real engine and optimizer.

    Args:
        table: The job on one GPU.
        eta: Cost knob in [0, 1].
        beta: Early-stop knob (None: off).
        seed: Seed of the optimizer and of the path draws.
        horizon: Recurrences (None: the paper's horizon).
        settings: Batch-size optimizer settings (default: the default policy, `zeus_run.spec.DEFAULT_POLICY`).
        max_tries: Counted tries per recurrence.
        baselines: Also compute the grid-search baseline (Default and Oracle are always computed).
        on_record: Called with each record as it is produced.
        max_early_stops: The engine's fallback rule (`zeus_run.engine.core.Engine`); None: the paper's semantics.
        concurrency: Recurrences in flight at once. Above 1 the job is always backlogged: a
            recurrence starts the moment one ends, and trials end in the order of their
            simulated time (`zeus_run.engine.concurrent.Clocked`), so each decision has seen only
            the trials that ended before it started.
        noise: Recurrence-wide slowdowns (`Noise`), drawn from ``seed``; None: none.
        plan_horizon: Tell the optimizer the horizon (a spec's ``recurrences``); False: open-ended.
        objective: What trials are charged and limits chosen by (default: ``cost`` with ``eta``;
            when given, ``eta`` is ignored). Grid search is charged the objective's energy-time
            cost without the ``max-slowdown`` penalty.
        warm: A warm start (`zeus_run.engine.warm.warm_start` of the job's records elsewhere); None: cold.
        life: Bad nights (`zeus_run.sim.Life`), drawn from ``seed``; None: none. An interrupted try or an
            environment error ends the engine's run as it ends a real one; the simulation resumes it, as
            the next trigger would.
        oom_retry_after: Recurrences with a model before a batch size that ran out of memory is tried again
            (the spec's ``oom_retry_after``; None: never, the rule before it existed).
        control: ``saving.control.max_share`` (`zeus_run.engine.control`): the default re-run as a control while
            the saving is too wide to say anything, within this share of the spend; None: never.

    Raises:
        zeus_run.errors.ConvergenceError: The first recurrence did not converge, or one ran out of tries.
    """
    settings = settings or OptimizerSettings()
    horizon = table.horizon if horizon is None else horizon
    slowdowns = noise.factors(seed, horizon) if noise is not None else ()
    given, objective = objective, objective or Objective("cost", eta=eta)
    eta = objective.cost_eta
    knobs = Knobs(
        batch_sizes=table.batch_sizes,
        default_batch_size=table.default_batch_size,
        eta=eta,
        beta=beta,
        seed=seed,
        optimizer=settings,
        target_metric=table.job.target_metric,
        max_epochs=table.job.max_epochs,
        max_tries=max_tries,
        max_early_stops=max_early_stops,
        concurrency=concurrency,
        horizon=horizon if plan_horizon else None,
        objective=given,
        warm=warm,
        oom_retry_after=oom_retry_after,
        control_share=control,
    )
    default, oracle = default_baseline(table, eta, objective), oracle_baseline(table, eta, objective)
    nights = (
        life.nights(seed, horizon, table.batch_sizes, table.default_batch_size, default.time, oracle.batch_size)
        if life
        else ()
    )
    executor = TraceExecutor(table, eta, seed, slowdowns, objective, nights)
    runs = Clocked(executor) if concurrency > 1 else executor
    b0 = executor._profiles[table.index(table.default_batch_size)]
    knobs = dataclasses.replace(knobs, default_profile=tuple(b0))
    records = (
        live(knobs, horizon, b0, runs, on_record)
        if nights
        else knobs.engine(horizon, lambda: b0).run([], runs, on_record)
    )
    cost = sum(r.spent_cost for r in records)
    energy = sum(r.energy for r in records)
    time = sum(r.time for r in records)
    last = records[-1] if records else None
    return SimResult(
        table=table,
        policy=settings.policy,
        seed=seed,
        horizon=horizon,
        records=records,
        cost=cost,
        energy=energy,
        time=time,
        default=default,
        oracle=oracle,
        grid_cost=grid_search_cost(table, eta, horizon, seed) if baselines else math.nan,
        final=(last.batch_size, last.power_limit) if last else (0, None),
        knobs=knobs,
        slowdowns=slowdowns,
        life=nights,
        truth=default_truth(table, executor, default, nights, records, max_tries) if nights else None,
    )
