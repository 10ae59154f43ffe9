"""``zeus-plus``: Zeus with cost-aware pruning.

The published pruning explores every batch size from b0 down until one fails,
then up until one fails, twice. Cost as a function of batch size is close to
unimodal, so most of that exploration pays for batch sizes that are clearly
worse than the best one seen. `CostAwarePruningState` changes three things,
using only observed (batch size, cost, reached):

* a direction also ends after a converged batch size whose cost exceeds
  ``stop_ratio`` x the round's best cost (the next one further out is likely worse);
* the upward direction is skipped when the round's start batch size already
  cost more than ``stop_ratio`` x the best (the cheaper side was below it);
* only batch sizes within ``keep_ratio`` x the round's best cost survive the round.

The bandit that follows is Gaussian Thompson Sampling as in Zeus, except
that each arm's variance is not learned from that arm alone (two noisy costs
give a wildly wrong variance, often near zero, and the bandit then locks onto
the wrong arm): it is shrunk toward the *relative* variance pooled over all
arms (`shrunk_posteriors`). Because the bandit can then judge an arm from a
single observation, ``zeus-plus`` defaults to one pruning round and one
observation per arm (`zeus_run.spec.POLICY_DEFAULTS`); Zeus's second round
re-ran every survivor, which mostly paid for batch sizes already known to be
worse.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from zeus_run.optimizer._pruning import PruningState
from zeus_run.optimizer._zeus import ZeusOptimizer, ZeusState


@dataclass(frozen=True)
class CostAwarePruningState(PruningState):
    """`PruningState` that stops early on costly batch sizes and keeps only cheap survivors.

    Attributes:
        stop_ratio: End a direction after a cost above this multiple of the round's best.
        keep_ratio: Survivors must cost at most this multiple of the round's best.
        costs: ``(batch_size, cost)`` of this round's converged trials.
    """

    stop_ratio: float = 1.5
    keep_ratio: float = 1.5
    costs: tuple[tuple[int, float], ...] = ()

    def observe(self, batch_size: int, cost: float, reached: bool) -> CostAwarePruningState:
        if self.done or batch_size != self.expecting:
            return self
        s = self
        if reached:
            s = dataclasses.replace(s, good=(*s.good, batch_size), costs=(*s.costs, (batch_size, cost)))
            if cost < s.best_cost:
                s = dataclasses.replace(s, best_cost=cost, best=batch_size)
            if cost > s.stop_ratio * s.best_cost:
                s = dataclasses.replace(s, direction=s.direction + 1, pos=0)
            else:
                s = dataclasses.replace(s, pos=s.pos + 1)
        else:
            s = dataclasses.replace(s, direction=s.direction + 1, pos=0)
        return s._skip_exhausted()

    def _start_round(self) -> CostAwarePruningState:
        return PruningState._start_round(dataclasses.replace(self, costs=()))

    def _start_too_costly(self) -> bool:
        start_cost = dict(self.costs).get(self.start)
        return start_cost is not None and start_cost > self.stop_ratio * self.best_cost

    def _skip_exhausted(self) -> CostAwarePruningState:
        s = self
        while s.direction < 2:
            if s.direction == 1 and s.pos == 0 and s._start_too_costly():
                s = dataclasses.replace(s, direction=2, pos=0)
            elif s.pos >= len((s.down, s.up)[s.direction]):
                s = dataclasses.replace(s, direction=s.direction + 1, pos=0)
            else:
                return s
        if s.good:
            cheap = {b for b, c in s.costs if c <= s.keep_ratio * s.best_cost}
            survivors, start = tuple(sorted(cheap)), s.best if s.best is not None else s.start
        else:
            survivors, start = s.candidates, s.start
        s = dataclasses.replace(s, round=s.round + 1, candidates=survivors, start=start)
        return s if s.done else s._start_round()


class ZeusPlusOptimizer(ZeusOptimizer):
    """Zeus with cost-aware pruning and pooled-noise Thompson Sampling (see the module docstring).

    Same fold interface and arguments as `ZeusOptimizer`, with ``zeus-plus``'s
    defaults (one pruning round, one observation per arm); ``prior_mean`` and
    ``prior_precision`` are not used (the pooled variance plays that role).
    """

    name = "zeus-plus"

    #: Defaults of the pruning ratios (chosen on the Zeus traces; see scripts/bench_optimizer.py).
    STOP_RATIO = 1.5
    KEEP_RATIO = 1.5
    #: Pseudo-observations (degrees of freedom) of the pooled relative variance in each arm's variance.
    VARIANCE_PRIOR_WEIGHT = 8.0
    #: Relative variance assumed before any arm has two observations (a 10% coefficient of
    #: variation), and its weight in degrees of freedom.
    PRIOR_CV2 = 0.01
    PRIOR_CV2_DOF = 1.0

    def initial_state(self) -> ZeusState:
        base = PruningState.begin(self.batch_sizes, self.default_batch_size, 0)
        pruning = CostAwarePruningState(
            rounds=self.pruning_rounds,
            round=0,
            candidates=base.candidates,
            start=self.default_batch_size,
            stop_ratio=self.STOP_RATIO,
            keep_ratio=self.KEEP_RATIO,
        )
        if self.pruning_rounds > 0:
            pruning = pruning._start_round()
        return ZeusState(step=0, pruning=pruning)

    def arm_posteriors(self, state: ZeusState, arms: tuple[int, ...]) -> list[tuple[float, float]]:
        """Posteriors with each arm's variance shrunk toward the pooled relative variance."""
        return shrunk_posteriors(
            [state.arms[a] for a in arms],
            self.VARIANCE_PRIOR_WEIGHT,
            self.PRIOR_CV2,
            self.PRIOR_CV2_DOF,
        )


def shrunk_posteriors(
    stats: list,
    prior_weight: float,
    prior_cv2: float = 0.0,
    prior_dof: float = 0.0,
) -> list[tuple[float, float]]:
    """Posterior ``(mean, precision)`` per arm with each arm's variance shrunk toward a pooled one.

    Costs of one job vary by a similar *relative* amount whatever the batch
    size (the number of epochs to reach the target is what varies), so the
    squared coefficient of variation is pooled over the arms with at least two
    rewards, plus ``prior_dof`` pseudo degrees of freedom at ``prior_cv2``:

        cv2   = (sum_i SS_i / m_i^2 + prior_dof * prior_cv2) / (sum_i (n_i - 1) + prior_dof)
        var_i = (SS_i + w * cv2 * m_i^2) / (n_i - 1 + w)

    where ``SS_i`` is arm i's sum of squared deviations, ``m_i`` its mean
    reward and ``w`` = ``prior_weight``. The precision of the mean is
    ``n_i / var_i`` (infinite when ``var_i`` is 0, as in Zeus).

    Args:
        stats: One `ArmStats` per arm (each with at least one reward).
        prior_weight: Pseudo degrees of freedom of the pooled variance in each arm's (``w``).
        prior_cv2: Relative variance assumed before any arm has two rewards.
        prior_dof: Weight of ``prior_cv2`` in the pool.
    """
    moments = [s.moments() for s in stats]
    pooled = [(n * v / (m * m), n - 1) for n, m, v in moments if n >= 2 and m != 0.0]
    dof = sum(d for _, d in pooled) + prior_dof
    cv2 = (sum(ss for ss, _ in pooled) + prior_dof * prior_cv2) / dof if dof > 0 else 0.0
    out = []
    for n, m, v in moments:
        den = n - 1 + prior_weight
        var = (n * v + prior_weight * cv2 * m * m) / den if den > 0 else 0.0
        out.append((m, math.inf) if var <= 0.0 else (m, n / var))
    return out
