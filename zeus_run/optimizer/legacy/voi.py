"""``zeus-voi`` revisions 1-9, frozen for replay: a value-of-information walk over batch sizes, then tempered Thompson Sampling.

Zeus explores by pruning: from b0 it runs every batch size downwards, then upwards, until one fails, twice
over. Most of that exploration pays for batch sizes that are clearly worse than the best one seen. ``zeus-voi``
decides each exploration step on what it may save, using only observed (batch size, cost, reached) and two facts
that hold for any training job: cost is close to unimodal in log batch size, and smooth from one to the next.

**The walk.** The batch sizes tried so far form an interval around b0 (b0 runs first). Before each
trial the policy looks at the next untried batch size beyond each end of that interval and predicts
its cost: the cost at that end, moved on by `TREND` times the last step's change in log cost (cost
rising towards that end predicts a further rise), with a spread of `STEP_SD` in log cost per step.
The probe is run if its expected improvement over the cheapest batch size so far, counted over the
future recurrences, exceeds its expected extra cost now (`planning_horizon`: the recurrences left
when the spec gives ``recurrences``, discounted). A single noisy cost at the end of a steep descent
does not end the walk on its own: the end's estimate is smoothed towards the straight-line
continuation of the two batch sizes before it (precision-weighted). An end that never reached the
target closes its side, as in Zeus.

**The bandit.** Otherwise the policy exploits with Gaussian Thompson Sampling over the batch sizes that
reached the target. Each arm's variance is shrunk toward the *relative* variance pooled over all arms (costs
of one job vary by a similar fraction whatever the batch size), so one observation per arm is enough. The
draws use `TS_SCALE` times the posterior's standard deviation: full-width Thompson Sampling is tuned for the
long run and over-explores close arms over tens or hundreds of recurrences. Because the walk is re-examined
before every trial, an end of the interval that becomes the cheapest arm later (its first cost was unlucky)
re-opens its side.

**Slow first runs** (revision 3): a first run's pace is checked (`LegacyVOIOptimizer.moments`). Second looks
(revisions 4, 6): `_second_look`; strides (7): `_stride`; the trend apart from epoch counts' noise (8): `_trend`;
costs without the power-limit sweep (9): `overhead`. Revision 10 and later: `zeus_run.optimizer.voi`. This room is
frozen: it changes only where a run directory recorded under these revisions would replay otherwise. The state is a pure fold over observations (`VOIState`); the only randomness is the
Thompson draw, seeded by ``(seed, step)``."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from zeus_run.optimizer._base import BatchSizeOptimizer, Decision, Observation
from zeus_run.optimizer._gts import ArmStats
from zeus_run.optimizer._stats import TINY as _TINY
from zeus_run.optimizer._stats import lognormal_shortfall
from zeus_run.optimizer._stats import median as _median
from zeus_run.optimizer.early_stop import PACE_WINDOW, SLOWDOWN, EarlyStopRule
from zeus_run.optimizer.legacy.overhead import without_sweep
from zeus_run.optimizer.legacy.pace import model_prior
from zeus_run.optimizer.legacy.second_look import recheck, second_look
from zeus_run.optimizer.legacy.stride import best_stride

if TYPE_CHECKING:
    from zeus_run.spec import OptimizerSettings

logger = logging.getLogger(__name__)

#: Revisions of ``zeus-voi``'s rules (`LegacyVOIOptimizer`).
REVISIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9)


@dataclass(frozen=True)
class VOIState:
    """Everything ``zeus-voi`` has learned.

    Attributes:
        step: Number of observations folded in.
        arms: Cost statistics of every batch size ever observed (unit: J; windowed
            if the policy has a ``window_size``).
        reached: Per batch size, how many of its trials reached the target.
        first: Per batch size, its first observation (revision 3).
        rest: Cost statistics of every later observation of each batch size (revision 3).
        paces: Per batch size, the cost per epoch of its most recent converged observations
            after the first (at most `PACE_WINDOW`; revision 3).
        spent: Cost of every observation (unit: J; revision 4's budget, `LegacyVOIOptimizer.within_budget`).
        epochs: Per batch size, the epochs of each of its converged observations (revision 5).
        checks: Converged runs of a batch size after its first, whose pace the engine checks against
            the batch size's median (revision 6, `LegacyVOIOptimizer.slow_runs`).
        slowdowns: The factor of each of those that ran over `SLOWDOWN` times slower (revision 6).
        overheads: Per batch size, its first run's sweep overhead over its steady cost (revision 9).
        epoch_totals: Per batch size, the sum and count of its converged runs' epochs (revision 8's `_trend`).
    """

    step: int
    arms: Mapping[int, ArmStats] = field(default_factory=dict)
    reached: Mapping[int, int] = field(default_factory=dict)
    first: Mapping[int, Observation] = field(default_factory=dict)
    rest: Mapping[int, ArmStats] = field(default_factory=dict)
    paces: Mapping[int, tuple[float, ...]] = field(default_factory=dict)
    spent: float = 0.0
    epochs: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    checks: int = 0
    slowdowns: tuple[float, ...] = ()
    overheads: Mapping[int, float] = field(default_factory=dict)
    epoch_totals: Mapping[int, tuple[int, int]] = field(default_factory=dict)


class Estimate(NamedTuple):
    """Posterior of one arm's mean cost.

    Attributes:
        mean: Posterior mean cost (unit: J).
        var: Variance of that mean (unit: J^2).
    """

    mean: float
    var: float


class LegacyVOIOptimizer(BatchSizeOptimizer[VOIState]):
    """Value-of-information walk over batch sizes, then tempered Gaussian TS (see the module docstring).

    Takes the same arguments as `zeus_run.optimizer.ZeusOptimizer` so that
    every policy is built the same way; ``pruning_rounds``, ``prior_mean``,
    ``prior_precision`` and ``num_explorations`` do not apply to it (the walk
    replaces pruning rounds, the pooled variance replaces the prior).
    """

    name = "zeus-voi"

    #: Recurrences over which a probe's expected saving is counted when the job is open-ended
    #: (``recurrences: null``) or the policy is revision 1: the discounted sum of the future,
    #: ``1 / (1 - DISCOUNT)``.
    PLANNING_HORIZON = 100.0
    #: Weight of a saving one recurrence later than another (revision 2). The future of a recurring
    #: job is uncertain (it is edited, retired, its data drift), so a saving k recurrences ahead
    #: counts ``DISCOUNT**k``; with a known horizon the sum stops at the recurrences left.
    DISCOUNT = 1.0 - 1.0 / PLANNING_HORIZON
    #: Spread of the change in log cost from one batch size to the next.
    STEP_SD = 0.15
    #: Fraction of the last step's change in log cost assumed to continue into the next step.
    TREND = 0.75
    #: Thompson draws use this multiple of the posterior standard deviation.
    TS_SCALE = 0.5
    #: Relative variance (squared coefficient of variation) of a trial's cost assumed before
    #: any arm has two observations, and its weight in degrees of freedom.
    PRIOR_CV2 = 0.01
    PRIOR_CV2_DOF = 1.0
    #: Pseudo-observations (degrees of freedom) of the pooled relative variance in each arm's variance.
    VARIANCE_PRIOR_WEIGHT = 8.0
    #: Beta prior of the chance that an untried batch size reaches the target (revision 4): Jeffreys'
    #: noninformative prior for a proportion.
    CONVERGE_PRIOR = (0.5, 0.5)
    #: What exploration may cost beyond the Default over the job, as a share of the Default's cost
    #: over the job (revision 4; `within_budget`): the "1.1x the Default" a team would notice.
    BUDGET = 0.1

    def __init__(
        self,
        batch_sizes: Iterable[int],
        default_batch_size: int,
        seed: int = 123456,
        window_size: int = 0,
        horizon: int | None = None,
        revision: int = 9,
    ) -> None:
        """Args:
        batch_sizes: Feasible batch sizes.
        default_batch_size: b0, tried first.
        seed: Seed of the Thompson draws.
        window_size: Most recent costs per arm the estimates use (0: all).
        horizon: Recurrences of the job (the spec's ``recurrences``; None: open-ended).
        revision: 9: as 8, costs
            without the power-limit sweep (`overhead`); 8: as 7, the trend counting a change in epochs as far as it
            stands out of their noise (`trend`); 7: as 6, with strides (`stride`); 6: as 4, a batch size whose only
            run may have been slow runs again (`recheck`); 5: as 4, an untried batch size's cost predicted as epochs x
            pace (`pace`) once two batch sizes converged; 4: as 3, a probe counts the chance it never converges
            (`converge_chance`) and stops by its learning curve (`early_stop.cannot_reach`); 3: as 2, a first run's
            pace checked (`moments`); 2: exploration valued over the recurrences left, and the robust early stop;
            1: a fixed `PLANNING_HORIZON` and the paper's early stop (replays: theirs). Modules in `zeus_run.optimizer.legacy`.
        """
        super().__init__(batch_sizes, default_batch_size, seed)
        if window_size < 0:
            raise ValueError(f"window_size must be >= 0, got {window_size}")
        if horizon is not None and horizon < 1:
            raise ValueError(f"horizon must be >= 1 or None (open-ended), got {horizon}")
        if revision not in REVISIONS:
            raise ValueError(f"revision must be one of {REVISIONS}, got {revision}")
        self.window_size = window_size
        self.horizon = horizon
        self.revision = revision
        #: Revision 5's epochs x pace model (`model_prior`); revision 6 builds on revision 4 without it.
        self.pace_model = revision == 5
        self.early_stop = EarlyStopRule("robust" if revision >= 2 else "paper", curve=revision >= 4)

    @classmethod
    def from_settings(
        cls,
        settings: OptimizerSettings,
        batch_sizes: tuple[int, ...],
        default_batch_size: int,
        seed: int,
        horizon: int | None = None,
    ) -> LegacyVOIOptimizer:
        """The revision a spec's ``optimizer`` section names: it reads ``window_size`` and ``revision``; Zeus's knobs
        set away from their defaults are logged as having no effect."""
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
            batch_sizes,
            default_batch_size,
            seed=seed,
            window_size=settings.window_size,
            horizon=horizon,
            revision=settings.revision,
        )

    def initial_state(self) -> VOIState:
        return VOIState(step=0)

    def observe(self, state: VOIState, obs: Observation) -> VOIState:
        if obs.batch_size not in self.batch_sizes:
            raise ValueError(f"observed batch size {obs.batch_size} is not one of {list(self.batch_sizes)}")
        spent = state.spent + obs.cost  # what was paid, the sweep included
        if self.revision >= 9:
            state, obs = without_sweep(state, obs)
        b = obs.batch_size
        arms = {**state.arms, b: state.arms.get(b, ArmStats()).add(obs.cost, self.window_size)}
        changes: dict[str, Any] = {"step": state.step + 1, "arms": arms, "spent": spent}  # one copy of the state
        if obs.reached:
            changes["reached"] = {**state.reached, b: state.reached.get(b, 0) + 1}
        if self.pace_model and obs.reached and obs.epochs > 0:  # revision 5's fit reads every run's epochs
            changes["epochs"] = {**state.epochs, b: (*state.epochs.get(b, ()), obs.epochs)}
        if self.revision >= 8 and obs.reached and obs.epochs > 0:  # the trend reads their mean: kept as totals
            total, n = state.epoch_totals.get(b, (0, 0))
            changes["epoch_totals"] = {**state.epoch_totals, b: (total + obs.epochs, n + 1)}
        if self.revision >= 3 and b not in state.first:
            changes["first"] = {**state.first, b: obs}
        elif self.revision >= 3:
            changes["rest"] = {**state.rest, b: state.rest.get(b, ArmStats()).add(obs.cost, self.window_size)}
            if obs.reached and obs.epochs > 0:
                changes["paces"] = {**state.paces, b: (*state.paces.get(b, ()), obs.cost / obs.epochs)[-PACE_WINDOW:]}
            if self.revision >= 6 and obs.reached:
                changes["checks"] = state.checks + 1
                if obs.slowdown > SLOWDOWN:
                    changes["slowdowns"] = (*state.slowdowns, obs.slowdown)
        return dataclasses.replace(state, **changes)

    def decide(self, state: VOIState, draw: int = 0) -> Decision:
        b0 = self.default_batch_size
        if b0 not in state.arms:
            return Decision(b0, "pruning", "default batch size first")
        converged = tuple(b for b in self.batch_sizes if state.reached.get(b, 0) > 0)
        if not converged:
            return Decision(b0, "pruning", "nothing has reached the target yet")
        est, cv2 = self.posterior(state)
        leader = min(converged, key=lambda b: est[b].mean)
        look = second_look(self, state, est) if self.revision >= 4 else None
        if look is not None:
            return Decision(look, "pruning", "second look: its first run ran slower than any batch size can")
        if self.revision >= 6:
            again = recheck(self, state, est, leader, cv2)
            if again is not None:
                return Decision(again[1], "pruning", f"second look: its only run may have been slow ({again[0]:.4g} J)")
        best_probe = best_stride if self.revision >= 7 else LegacyVOIOptimizer.best_probe
        probe = best_probe(self, state, est, leader, cv2, self.planning_horizon(state))
        if probe is not None:
            return probe
        return self.thompson(state, est, converged, draw)

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
        ``lifetime``, the same at every recurrence (100, that sum's limit); revision 1: `PLANNING_HORIZON`.
        """
        if self.revision < 2 or self.horizon is None:
            return self.PLANNING_HORIZON if self.revision < 2 else float(self.lifetime)
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
        moments = self.moments(state) if self.revision >= 3 else {b: a.moments() for b, a in state.arms.items()}
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
        """``(count, mean, population variance)`` of each batch size's costs, first runs checked for pace (revision 3).

        A batch size's first run has no earlier run to compare its pace (cost per epoch) with: if it fell in
        a slow recurrence (a shared GPU, a slow file system), its cost would rule its batch size out for good,
        and if that batch size is b0 (recurrence 1) the walk settles on a wrong batch size. Epochs to the
        target do not depend on the machine, pace does. So a first run's pace is compared with the median
        pace of the batch size's later converged runs or, while there are none, with the pace of the nearest
        smaller batch size tried (a larger batch runs an epoch about as fast or faster; revision 5 also bounds
        it by ``B / b`` times the pace of the nearest larger batch size ``B`` tried, the most a smaller batch
        can slow an epoch). If it ran more than `SLOWDOWN` times slower than that, its cost is taken at that
        pace: the batch size stays in contention, and a Thompson draw runs it again while it looks
        competitive. Later runs are checked by the robust early stop (`zeus_run.optimizer.early_stop.Pace`)
        before they reach the optimizer. A wrong correction costs at most that one more run.
        """
        own = {b: _median(p) for b, p in state.paces.items() if p}
        pace = {b: f.cost / f.epochs for b, f in state.first.items() if f.reached and f.epochs > 0}
        steady = {b: p for b in state.first if (p := own.get(b, pace.get(b))) is not None}
        out = {}
        for b, first in state.first.items():
            cost = first.cost
            if b in pace:
                ref = own.get(b)
                if ref is None:  # no later run of its own: its neighbours' (looked up only here)
                    below = max((c for c in steady if c < b), default=0)  # (batch sizes are at least 1)
                    above = min((c for c in steady if c > b), default=0)
                    ref = steady[below] if below else None
                    if self.pace_model and above:  # at most B / b times B's pace
                        ref = steady[above] * above / b if ref is None else min(ref, steady[above] * above / b)
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

    # -- the walk ---------------------------------------------------------------------------

    def best_probe(
        self, state: VOIState, est: Mapping[int, Estimate], leader: int, cv2: float, horizon: float | None = None
    ) -> Decision | None:
        """The untried batch size beyond an end of the tried interval worth probing most, if any is."""
        bs = self.batch_sizes
        tried = [i for i, b in enumerate(bs) if b in state.arms]
        best: tuple[float, int, str] | None = None
        for side, end, step in (("downwards", min(tried), -1), ("upwards", max(tried), 1)):
            if not 0 <= end + step < len(bs) or bs[end] not in est:
                continue  # no batch size beyond, or this end never reached the target
            p = self.converge_chance(state)
            prior = self.model_prior(state, est, bs[end + step], cv2, self.predict(bs, est, end, step, cv2))
            value = self.probe_value(bs, est, end, step, est[leader].mean, cv2, horizon, p, prior)
            mu, sd = prior or self.predict(bs, est, end, step, cv2)
            if (
                value > 0
                and self.within_budget(state, est, math.exp(mu + sd * sd / 2.0), p)
                and (best is None or value > best[0])
            ):
                best = (value, bs[end + step], side)
        if best is None:
            return None
        value, batch_size, side = best
        return Decision(batch_size, "pruning", f"{side}: expected saving exceeds the probe's cost by {value:.4g} J")

    def probe_value(
        self,
        bs: tuple[int, ...],
        est: Mapping[int, Estimate],
        end: int,
        step: int,
        best_cost: float,
        cv2: float,
        horizon: float | None = None,
        converge: float = 1.0,
        prior: tuple[float, float] | None = None,
    ) -> float:
        """Expected saving of probing ``bs[end + step]`` over ``horizon`` recurrences, minus its expected extra cost.

        ``horizon`` None: `PLANNING_HORIZON`. ``converge``: the chance that the probe reaches the
        target (`converge_chance`). ``prior``: mean and sd of the probe's log cost from revision 5's
        model (`model_prior`), in place of the walk's prediction. One that does not saves nothing and its whole cost is lost (the
        recurrence runs again); it is charged the cost it would have had converging: its
        learning curve stops it earlier, the threshold (``beta x`` the best) later.

        Log cost of the end batch size: its estimate, smoothed toward the straight
        line through the two batch sizes inside it. The probe's log cost: that,
        plus `TREND` x the last step's change, with spread ``STEP_SD`` plus the
        estimate's and one trial's uncertainty (unit of the result: J).
        """
        mu, sd = prior or self.predict(bs, est, end, step, cv2)
        gain = lognormal_shortfall(mu, sd, best_cost)
        expected = math.exp(mu + sd * sd / 2.0)
        extra = expected - converge * best_cost
        return converge * gain * (self.PLANNING_HORIZON if horizon is None else horizon) - extra

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

    def model_prior(
        self, state: VOIState, est: Mapping[int, Estimate], batch_size: int, cv2: float, walk: tuple[float, float]
    ) -> tuple[float, float] | None:
        """Revision 5's prior of an untried batch size's log cost (`zeus_run.optimizer.legacy.pace.model_prior`)."""
        return model_prior(self, state, est, batch_size, cv2, walk) if self.pace_model else None

    def within_budget(self, state: VOIState, est: Mapping[int, Estimate], probe: float, converge: float) -> bool:
        """Whether a probe keeps the job's expected cost within ``1 + BUDGET`` times the Default's (revision 4).

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
        if self.revision < 4 or b0 not in est:
            return True
        default = est[b0].mean
        n = self.lifetime if self.horizon is None else self.horizon
        excess = state.spent - default * sum(state.reached.values())
        return excess + probe - converge * default <= self.BUDGET * default * n

    def converge_chance(self, state: VOIState) -> float:
        """Chance that an untried batch size reaches the target (revision 4; 1.0 before).

        The posterior mean under `CONVERGE_PRIOR` ``(a, b)`` over the batch sizes tried, each counted
        by its first run: ``(converged + a) / (tried + a + b)``. With b0 alone converged: 3/4.
        """
        if self.revision < 4:
            return 1.0
        converged = sum(1 for f in state.first.values() if f.reached)
        a, b = self.CONVERGE_PRIOR
        return (converged + a) / (len(state.first) + a + b)

    # -- the bandit -------------------------------------------------------------------------

    def thompson(self, state: VOIState, est: Mapping[int, Estimate], arms: tuple[int, ...], draw: int = 0) -> Decision:
        """Tempered Gaussian TS: the arm with the lowest draw from ``N(mean, (TS_SCALE x sd)^2)``.

        ``draw`` selects the random stream (`BatchSizeOptimizer.rng`; 0 in serial runs).
        """
        rng = self.rng(state.step, draw)
        draws = [est[b].mean + self.TS_SCALE * math.sqrt(est[b].var) * rng.gauss(0.0, 1.0) for b in arms]
        i = min(range(len(arms)), key=draws.__getitem__)
        return Decision(arms[i], "thompson", f"sampled mean cost {draws[i]:.4g} J")
