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
that each arm's variance (learned from as few as two noisy costs, which can
make the bandit lock onto the wrong arm) is shrunk toward the variance pooled
over all arms relative to their mean cost (`shrunk_posteriors`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from zeus_run.optimizer._pruning import PruningState
from zeus_run.optimizer._base import Decision
from zeus_run.optimizer._gts import sample_means
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

    def observe(self, batch_size: int, cost: float, reached: bool) -> "CostAwarePruningState":
        if self.done or batch_size != self.expecting:
            return self
        s = self
        if reached:
            s = dataclasses.replace(s, good=s.good + (batch_size,), costs=s.costs + ((batch_size, cost),))
            if cost < s.best_cost:
                s = dataclasses.replace(s, best_cost=cost, best=batch_size)
            if cost > s.stop_ratio * s.best_cost:
                s = dataclasses.replace(s, direction=s.direction + 1, pos=0)
            else:
                s = dataclasses.replace(s, pos=s.pos + 1)
        else:
            s = dataclasses.replace(s, direction=s.direction + 1, pos=0)
        return s._skip_exhausted()

    def _start_round(self) -> "CostAwarePruningState":
        return PruningState._start_round(dataclasses.replace(self, costs=()))

    def _start_too_costly(self) -> bool:
        start_cost = dict(self.costs).get(self.start)
        return start_cost is not None and start_cost > self.stop_ratio * self.best_cost

    def _skip_exhausted(self) -> "CostAwarePruningState":
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
            survivors, start = tuple(sorted(cheap)), s.best
        else:
            survivors, start = s.candidates, s.start
        s = dataclasses.replace(s, round=s.round + 1, candidates=survivors, start=start)
        return s if s.done else s._start_round()


class ZeusPlusOptimizer(ZeusOptimizer):
    """Zeus with cost-aware pruning (see the module docstring); same fold interface and bandit."""

    name = "zeus-plus"

    #: Defaults of the pruning ratios (chosen on the Zeus traces; see scripts/bench_optimizer.py).
    STOP_RATIO = 1.5
    KEEP_RATIO = 1.5

    def initial_state(self) -> ZeusState:
        base = PruningState.begin(self.batch_sizes, self.default_batch_size, 0)
        pruning = CostAwarePruningState(
            rounds=self.pruning_rounds, round=0, candidates=base.candidates, start=self.default_batch_size,
            stop_ratio=self.STOP_RATIO, keep_ratio=self.KEEP_RATIO,
        )
        if self.pruning_rounds > 0:
            pruning = pruning._start_round()
        return ZeusState(step=0, pruning=pruning)

    #: Pseudo-observations of the pooled relative variance in each arm's variance.
    VARIANCE_PRIOR_WEIGHT = 4.0

    def sample(self, state: ZeusState, arms: tuple[int, ...]) -> Decision:
        """Thompson Sampling with per-arm variances shrunk toward the pooled relative variance."""
        rng = self.rng(state.step)
        order = list(range(len(arms)))
        rng.shuffle(order)
        for idx in order:
            n = self._count(state, arms[idx])
            if n < self.num_explorations or n == 0:
                return Decision(arms[idx], "explore", f"arm has {n} observation(s)")
        posts = shrunk_posteriors([state.arms[a] for a in arms], self.VARIANCE_PRIOR_WEIGHT)
        draws = sample_means(rng, posts)
        best = max(range(len(arms)), key=draws.__getitem__)
        return Decision(arms[best], "thompson", f"sampled mean reward {draws[best]:.4g}")


def shrunk_posteriors(stats: list, prior_weight: float) -> list[tuple[float, float]]:
    """Posterior ``(mean, precision)`` per arm with each arm's variance shrunk toward a pooled one.

    Two noisy costs give a wildly wrong variance (often near zero), which makes
    Thompson Sampling lock onto an arm. Costs of one job vary by a similar
    *relative* amount whatever the batch size, so each arm's variance is
    shrunk toward the pooled relative variance (scaled by the arm's squared
    mean), with ``prior_weight`` pseudo-observations:

        var_i = (n_i * s2_i + w * cv2 * mean_i^2) / (n_i + w)

    Args:
        stats: One `ArmStats` per arm (each with at least one reward).
        prior_weight: Pseudo-observations of the pooled variance (``w``).
    """
    moments = [s.moments() for s in stats]
    num = sum(n * v for n, m, v in moments if n >= 2 and m != 0.0)
    den = sum(n * m * m for n, m, v in moments if n >= 2 and m != 0.0)
    cv2 = num / den if den > 0 else 0.0
    out = []
    for n, m, v in moments:
        var = (n * v + prior_weight * cv2 * m * m) / (n + prior_weight)
        out.append((m, math.inf) if var <= 0.0 else (m, n / var))
    return out
