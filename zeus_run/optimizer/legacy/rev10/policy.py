"""``zeus-voi``, revision 10: a value-of-information walk over batch sizes, then a bandit with a horizon.

Zeus explores by pruning: from b0 it runs every batch size downwards, then upwards, until one fails, twice
over. Most of that exploration pays for batch sizes that are clearly worse than the best one seen. ``zeus-voi``
decides each exploration step on what it may save, using only observed (batch size, cost, reached, epochs) and
facts that hold for any training job: cost is close to unimodal in log batch size and smooth from one to the
next, and it is epochs to the target times the cost of an epoch, each with its law.

Before each trial, in order (`ZeusVOIOptimizer.decide`):

1. b0 first, and b0 again while nothing has reached the target.
2. **Second looks** (`zeus_run.optimizer.legacy.rev10.looks`): a batch size whose only run may have been slow runs again.
3. **The walk** (`zeus_run.optimizer.legacy.rev10.walk`, valued in `zeus_run.optimizer.legacy.rev10.laws`): the batch sizes tried
   form an interval around b0; the next untried batch size beyond each end (on a grid of half a doubling), a
   stride down a sure descent, a gap a stride left, a jump where the laws of epochs and pace are identified, and,
   warm, the batch sizes the source saw converge (`zeus_run.optimizer.legacy.rev10.warm`). Each is probed if its expected
   saving over the recurrences left (`planning_horizon`, discounted) exceeds its expected extra cost now, within
   the budget (`within_budget`). An end that never reached the target closes its side, as in Zeus.
4. **The bandit** (`zeus_run.optimizer.legacy.rev10.bandit`): the cheapest arm, unless one more run of another pays over
   the recurrences left (stage ``exploit``).

Costs are learnt without the first run's power-limit sweep, a first run's pace is checked against its
neighbours' (`moments`), and each arm's variance is shrunk toward the relative variance pooled over all arms
(`posterior`). The state is a pure fold over observations (`zeus_run.optimizer.legacy.rev10.state.VOIState`); nothing is
drawn. Revisions 1-9 are frozen in `zeus_run.optimizer.legacy` for the run directories recorded under them.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from zeus_run.optimizer._base import BatchSizeOptimizer, Decision, Observation
from zeus_run.optimizer._gts import ArmStats
from zeus_run.optimizer._stats import TINY as _TINY
from zeus_run.optimizer._stats import median as _median
from zeus_run.optimizer.early_stop import PACE_WINDOW, SLOWDOWN, EarlyStopRule
from zeus_run.optimizer.legacy.rev10.bandit import exploit
from zeus_run.optimizer.legacy.rev10.laws import best_probe, walk_grid
from zeus_run.optimizer.legacy.rev10.looks import recheck, second_look
from zeus_run.optimizer.legacy.rev10.state import Estimate, VOIState, WarmStart, add_log
from zeus_run.optimizer.legacy.rev10.walk import without_sweep
from zeus_run.optimizer.legacy.rev10.warm import candidates as warm_candidates
from zeus_run.optimizer.legacy.rev10.warm import observe_warm

if TYPE_CHECKING:
    from zeus_run.spec import OptimizerSettings

logger = logging.getLogger(__name__)

#: The revision this module is (`zeus_run.spec.OptimizerSettings.revision`); earlier ones: `zeus_run.optimizer.legacy`.
REVISION = 10


class ZeusVOIOptimizer(BatchSizeOptimizer[VOIState]):
    """Value-of-information walk over batch sizes, then a bandit with a horizon (see the module docstring)."""

    name = "zeus-voi"
    revision = REVISION
    #: The robust early stop, with the learning curve's check (`zeus_run.optimizer.early_stop`).
    early_stop = EarlyStopRule("robust", curve=True)

    #: Recurrences over which a probe's expected saving is counted when the job is open-ended
    #: (``recurrences: null``) and no ``lifetime`` is told: the discounted sum of the future,
    #: ``1 / (1 - DISCOUNT)``.
    PLANNING_HORIZON = 100.0
    #: Weight of a saving one recurrence later than another. The future of a recurring
    #: job is uncertain (it is edited, retired, its data drift), so a saving k recurrences ahead
    #: counts ``DISCOUNT**k``; with a known horizon the sum stops at the recurrences left.
    DISCOUNT = 1.0 - 1.0 / PLANNING_HORIZON
    #: Spread of the change in log cost from one batch size to the next.
    STEP_SD = 0.15
    #: Fraction of the last step's change in log cost assumed to continue into the next step.
    TREND = 0.75
    #: Relative variance (squared coefficient of variation) of a trial's cost assumed before
    #: any arm has two observations, and its weight in degrees of freedom.
    PRIOR_CV2 = 0.01
    PRIOR_CV2_DOF = 1.0
    #: Pseudo-observations (degrees of freedom) of the pooled relative variance in each arm's variance.
    VARIANCE_PRIOR_WEIGHT = 8.0
    #: Beta prior of the chance that an untried batch size reaches the target: Jeffreys'
    #: noninformative prior for a proportion.
    CONVERGE_PRIOR = (0.5, 0.5)
    #: What exploration may cost beyond the Default over the job, as a share of the Default's cost
    #: over the job (`within_budget`): the "1.1x the Default" a team would notice.
    BUDGET = 0.1

    def __init__(
        self,
        batch_sizes: Iterable[int],
        default_batch_size: int,
        seed: int = 123456,
        window_size: int = 0,
        horizon: int | None = None,
        warm: WarmStart | None = None,
    ) -> None:
        """Args:
        batch_sizes: Feasible batch sizes.
        default_batch_size: b0, tried first.
        seed: Seed of the optimizer (it draws nothing; kept so every policy is seeded alike).
        window_size: Most recent costs per arm the estimates use (0: all).
        horizon: Recurrences of the job (the spec's ``recurrences``; None: open-ended).
        warm: The warm start's source (`zeus_run.optimizer.legacy.rev10.warm`), folded into `initial_state`; None: cold.
        """
        super().__init__(batch_sizes, default_batch_size, seed)
        if window_size < 0:
            raise ValueError(f"window_size must be >= 0, got {window_size}")
        if horizon is not None and horizon < 1:
            raise ValueError(f"horizon must be >= 1 or None (open-ended), got {horizon}")
        self.window_size = window_size
        self.horizon = horizon
        self.warm = warm

    @classmethod
    def from_settings(
        cls,
        settings: OptimizerSettings,
        batch_sizes: tuple[int, ...],
        default_batch_size: int,
        seed: int,
        horizon: int | None = None,
        warm: WarmStart | None = None,
    ) -> ZeusVOIOptimizer:
        """The policy a spec's ``optimizer`` section asks for: it reads ``window_size``; the knobs of Zeus's
        pruning and prior (``pruning_rounds``, ``num_explorations``, ``prior_mean``, ``prior_precision``) do not
        apply to it, and one set away from its default is logged as having no effect."""
        ignored = {
            "pruning_rounds": (settings.pruning_rounds, (None, 0)),
            "num_explorations": (settings.num_explorations, (None, 1)),
            "prior_mean": (settings.prior_mean, (0.0,)),
            "prior_precision": (settings.prior_precision, (0.0,)),
        }
        for knob, (value, defaults) in ignored.items():
            if value not in defaults:
                logger.warning("optimizer.%s = %r has no effect on the %s policy", knob, value, cls.name)
        return cls(
            batch_sizes, default_batch_size, seed=seed, window_size=settings.window_size, horizon=horizon, warm=warm
        )

    @functools.cached_property
    def walker(self) -> ZeusVOIOptimizer:
        """This policy on the walk's grid (`zeus_run.optimizer.legacy.rev10.laws.walk_grid`): what it probes beyond the tried
        range, built once (it depends on the batch sizes and b0 alone)."""
        walker = copy.copy(self)
        walker.batch_sizes = walk_grid(self.batch_sizes, self.default_batch_size)
        return walker

    def initial_state(self) -> VOIState:
        """The state before any trial here: the warm start's source folded in (nothing, cold)."""
        state = VOIState(step=0)
        for obs in self.warm.observations if self.warm is not None else ():
            state = self.observe(state, obs)
        return state

    def observe(self, state: VOIState, obs: Observation) -> VOIState:
        if obs.warm:  # the source's: what it says of each batch size, apart from this run's arms
            return observe_warm(state, obs) if obs.batch_size in self.batch_sizes else state
        if obs.batch_size not in self.batch_sizes:
            raise ValueError(f"observed batch size {obs.batch_size} is not one of {list(self.batch_sizes)}")
        spent = state.spent + obs.cost  # what was paid, the sweep included
        state, obs = without_sweep(state, obs)
        b = obs.batch_size
        arms = {**state.arms, b: state.arms.get(b, ArmStats()).add(obs.cost, self.window_size)}
        changes: dict[str, Any] = {"step": state.step + 1, "arms": arms, "spent": spent}  # one copy of the state
        if obs.reached:
            changes["reached"] = {**state.reached, b: state.reached.get(b, 0) + 1}
        if obs.reached and obs.epochs > 0:
            # the laws, their noise and the trend read the epochs as running totals: a decision costs the same at
            # recurrence 10 and 10,000
            changes["epoch_logs"] = {**state.epoch_logs, b: add_log(state.epoch_logs.get(b), obs.epochs)}
            total, n = state.epoch_totals.get(b, (0, 0))
            changes["epoch_totals"] = {**state.epoch_totals, b: (total + obs.epochs, n + 1)}
        if b not in state.first:
            changes["first"] = {**state.first, b: obs}
        else:
            changes["rest"] = {**state.rest, b: state.rest.get(b, ArmStats()).add(obs.cost, self.window_size)}
            if obs.reached and obs.epochs > 0:
                paces = (*state.paces.get(b, ()), obs.cost / obs.epochs)[-PACE_WINDOW:]
                changes["paces"] = {**state.paces, b: paces}
                changes["pace_medians"] = {**state.pace_medians, b: _median(paces)}
            if obs.reached:
                changes["checks"] = state.checks + 1
                if obs.slowdown > SLOWDOWN:
                    changes["slowdowns"] = (*state.slowdowns, obs.slowdown)
        return VOIState(**{**state.__dict__, **changes})  # as dataclasses.replace, without its introspection

    def decide(self, state: VOIState, draw: int = 0) -> Decision:
        b0 = self.default_batch_size
        if b0 not in state.arms:
            return Decision(b0, "pruning", "default batch size first")
        converged = tuple(b for b in self.batch_sizes if state.reached.get(b, 0) > 0)
        if not converged:
            return Decision(b0, "pruning", "nothing has reached the target yet")
        est, cv2 = self.posterior(state)
        leader = min(converged, key=lambda b: est[b].mean)
        look = second_look(self, state, est)
        if look is not None:
            return Decision(look, "pruning", "second look: its first run ran slower than any batch size can")
        again = recheck(self, state, est, leader, cv2)
        if again is not None:
            return Decision(again[1], "pruning", f"second look: its only run may have been slow ({again[0]:.4g} J)")
        horizon = self.planning_horizon(state)
        probe = best_probe(self, state, est, leader, cv2, horizon)
        if probe is not None:
            return probe
        return exploit(est, converged, cv2, horizon)

    def leader(self, state: VOIState) -> int | None:
        """The converged batch size with the lowest posterior mean cost (None before any converged)."""
        converged = tuple(b for b in self.batch_sizes if state.reached.get(b, 0) > 0)
        if not converged:
            return None
        est, _ = self.posterior(state)
        return min(converged, key=lambda b: est[b].mean)

    def planning_horizon(self, state: VOIState) -> float:
        """Discounted recurrences after the next one over which a probe's saving counts.

        ``sum_{k<n} DISCOUNT**k`` with ``n`` the recurrences left after the next one
        (horizon minus the converged trials so far, minus one); open-ended jobs: their expected
        ``lifetime``, the same at every recurrence (100, that sum's limit).
        """
        if self.horizon is None:
            return float(self.lifetime)
        left = max(0, self.horizon - sum(state.reached.values()) - 1)
        return (1.0 - self.DISCOUNT**left) / (1.0 - self.DISCOUNT)

    # -- estimates ------------------------------------------------------------------------

    def posterior(self, state: VOIState) -> tuple[dict[int, Estimate], float]:
        """Posterior of each converged arm's mean cost, and the pooled relative variance of one trial's cost.

        The relative variance is pooled over arms with two or more costs, plus ``PRIOR_CV2_DOF`` pseudo
        degrees of freedom at ``PRIOR_CV2``:

            cv2   = (sum_i SS_i / m_i^2 + dof0 * cv2_0) / (sum_i (n_i - 1) + dof0)
            var_i = (SS_i + w * cv2 * m_i^2) / (n_i - 1 + w),  Var[mean_i] = var_i / n_i

        ``SS_i``: arm i's sum of squared deviations, ``m_i`` its mean cost, ``w`` = ``VARIANCE_PRIOR_WEIGHT``.
        """
        moments = self.moments(state)
        ss, dof = self.PRIOR_CV2_DOF * self.PRIOR_CV2, self.PRIOR_CV2_DOF
        for n, mean, var in moments.values():
            if n >= 2 and mean > 0:
                ss += n * var / (mean * mean)
                dof += n - 1
        cv2 = ss / dof
        w = self.VARIANCE_PRIOR_WEIGHT
        est = {}
        for b, (n, mean, var) in moments.items():
            if state.reached.get(b, 0) > 0:
                est[b] = Estimate(mean, (n * var + w * cv2 * mean * mean) / (n - 1 + w) / n)
        return est, cv2

    def moments(self, state: VOIState) -> dict[int, tuple[int, float, float]]:
        """``(count, mean, population variance)`` of each batch size's costs, first runs checked for pace.

        A batch size's first run has no earlier run to compare its pace (cost per epoch) with: if it fell in
        a slow recurrence (a shared GPU, a slow file system), its cost would rule its batch size out for good,
        and if that batch size is b0 (recurrence 1) the walk settles on a wrong batch size. Epochs to the
        target do not depend on the machine, pace does. So a first run's pace is compared with the median
        pace of the batch size's later converged runs or, while there are none, with the pace of the nearest
        smaller batch size tried (a larger batch runs an epoch about as fast or faster). If it ran more than `SLOWDOWN` times slower than that, its cost is taken at that
        pace: the batch size stays in contention, and a Thompson draw runs it again while it looks
        competitive. Later runs are checked by the robust early stop (`zeus_run.optimizer.early_stop.Pace`)
        before they reach the optimizer. A wrong correction costs at most that one more run.
        """
        own = state.pace_medians
        pace = {b: f.cost / f.epochs for b, f in state.first.items() if f.reached and f.epochs > 0}
        steady = {b: p for b in state.first if (p := own.get(b, pace.get(b))) is not None}
        out = {}
        for b, first in state.first.items():
            cost = first.cost
            if b in pace:
                ref = own.get(b)
                if ref is None:  # no later run of its own: its neighbours' (looked up only here)
                    below = max((c for c in steady if c < b), default=0)  # (batch sizes are at least 1)
                    ref = steady[below] if below else None
                if ref is not None and pace[b] > SLOWDOWN * ref:
                    cost = ref * first.epochs
            n, mean, var = state.rest[b].moments() if b in state.rest else (0, 0.0, 0.0)
            if 0 < self.window_size <= n:
                out[b] = (n, mean, var)  # the first run is out of the window
                continue
            total = n + 1
            new_mean = (n * mean + cost) / total
            m2 = n * var + n * (mean - new_mean) ** 2 + (cost - new_mean) ** 2
            out[b] = (total, new_mean, m2 / total)
        return out

    # -- the walk's prediction and budget ----------------------------------------------------

    def warm_candidates(
        self, state: VOIState, est: Mapping[int, Estimate], cv2: float, grid: Sequence[int]
    ) -> Iterator[tuple[int, str, tuple[float, float]]]:
        """The batch sizes a warm start proposes, with the mean and sd of their log cost here
        (`zeus_run.optimizer.legacy.rev10.warm.candidates`; revision 11 prices them its own way)."""
        return warm_candidates(self, state, est, cv2, grid)

    def predict(
        self, bs: tuple[int, ...], est: Mapping[int, Estimate], end: int, step: int, cv2: float
    ) -> tuple[float, float]:
        """Mean and standard deviation of the log cost of ``bs[end + step]`` (see `probe_value`)."""
        e = est[bs[end]]
        log_end, var_end = math.log(max(e.mean, _TINY)), e.var / max(e.mean, _TINY) ** 2
        inner, inner2 = end - step, end - 2 * step
        if 0 <= inner2 < len(bs) and bs[inner] in est and bs[inner2] in est:
            l1, l2 = math.log(max(est[bs[inner]].mean, _TINY)), math.log(max(est[bs[inner2]].mean, _TINY))
            line, var_line = 2.0 * l1 - l2, self.STEP_SD**2 + 2.0 * cv2
            precision = 1.0 / max(var_end, _TINY) + 1.0 / var_line
            log_end = (log_end / max(var_end, _TINY) + line / var_line) / precision
            var_end = 1.0 / precision
        trend = 0.0
        if 0 <= inner < len(bs) and bs[inner] in est:
            trend = self.TREND * (log_end - math.log(max(est[bs[inner]].mean, _TINY)))
        mu = log_end + trend
        sd = math.sqrt(self.STEP_SD**2 + var_end + cv2)
        return mu, sd

    def within_budget(self, state: VOIState, est: Mapping[int, Estimate], probe: float, converge: float) -> bool:
        """Whether a probe keeps the job's expected cost within ``1 + BUDGET`` times the Default's

        The Default is b0 every time; its cost ``D`` is b0's posterior mean (b0 runs first). The
        excess so far is what the runs cost beyond ``D`` per recurrence done; the probe adds its
        expected cost ``probe`` less ``D`` times the chance it converges (one that does not is lost
        whole and its recurrence runs again). The job may exceed the Default by at most
        ``BUDGET x D x N``, ``N`` its recurrences, or its expected ``lifetime`` when open-ended (100 by default,
        the discount's effective horizon). Savings found so far (a leader cheaper than b0) fund more exploration.

        Args:
            state: What has been observed.
            est: Posterior of each converged arm.
            probe: The probe's expected cost if it converges (unit: J).
            converge: The chance that it converges (`converge_chance`).
        """
        b0 = self.default_batch_size
        if b0 not in est:
            return True
        default = est[b0].mean
        n = self.lifetime if self.horizon is None else self.horizon
        excess = state.spent - default * sum(state.reached.values())
        return excess + probe - converge * default <= self.BUDGET * default * n

    def converge_chance(self, state: VOIState) -> float:
        """Chance that an untried batch size reaches the target.

        The posterior mean under `CONVERGE_PRIOR` ``(a, b)`` over the batch sizes tried, each counted
        by its first run: ``(converged + a) / (tried + a + b)``. With b0 alone converged: 3/4.
        """
        converged = sum(1 for f in state.first.values() if f.reached)
        a, b = self.CONVERGE_PRIOR
        return (converged + a) / (len(state.first) + a + b)
