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

The bandit that follows is the faithful Gaussian Thompson Sampling.
"""

from __future__ import annotations

import dataclasses
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
