"""zeus-voi's second looks: a batch size whose only run may have been slow is run once more.

`second_look`: a batch size below b0 whose first run ran slower than any batch size can. `recheck`: a
converged batch size with one run, whose cost its neighbours say may have been slowed by as much as the
slowdowns seen (`slow_runs`). Functions of the policy's face (`zeus_run.optimizer.voi.state.Policy`) and its
state, pure as its fold is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from zeus_run.optimizer._stats import TINY
from zeus_run.optimizer._stats import median as _median
from zeus_run.optimizer.early_stop import SLOWDOWN
from zeus_run.optimizer.voi.state import Estimate, Policy, VOIState


def second_look(opt: Policy, state: VOIState, est: Mapping[int, Estimate]) -> int | None:
    """A batch size below b0 whose only run looks slow, to run once more.

    `ZeusVOIOptimizer.moments` checks a first run's pace against the nearest smaller batch size tried; a
    walk downwards has none, and a probe whose first run fell in a slow recurrence closes
    the walk's lower side for good. A smaller batch size runs more, smaller iterations per
    epoch; at worst each takes as long as the larger batch size's, so its cost per epoch
    is at most ``B / b`` times that of the larger batch size ``B`` next to it. A first run
    more than `SLOWDOWN` times slower than that bound ran slow: it is run once more, within
    the budget (`ZeusVOIOptimizer.within_budget`), and that run checks the first one's pace (`ZeusVOIOptimizer.moments`).
    """
    bs, b0 = opt.batch_sizes, opt.default_batch_size
    for i, b in enumerate(bs[: bs.index(b0)]):
        first, larger = state.first.get(b), bs[i + 1]
        if first is None or not first.reached or first.epochs <= 0 or b in state.rest:
            continue
        ref = state.first.get(larger)
        if ref is None or not ref.reached or ref.epochs <= 0 or larger not in est:
            continue
        pace = _median(state.paces[larger]) if state.paces.get(larger) else ref.cost / ref.epochs
        if first.cost / first.epochs > SLOWDOWN * pace * larger / b and opt.within_budget(
            state, est, est[larger].mean, 1.0, b
        ):
            return b
    return None


def slow_runs(opt: Policy, state: VOIState) -> tuple[float, tuple[float, ...]]:
    """Chance that a run is slowed, and the slowdowns seen.

    Measured on the runs that can be checked, a batch size's runs after its first: the engine
    compares each one's pace with the batch size's median and takes a slow one's cost at that
    median (`Observation.slowdown`). The chance is the posterior mean under
    `CONVERGE_PRIOR` (Jeffreys): ``(slow + 1/2) / (checked + 1)``. Without a slowdown seen
    there is nothing to correct a run by, and the caller takes none.
    """
    a, b = opt.CONVERGE_PRIOR
    return (len(state.slowdowns) + a) / (sum(state.reached.values()) + a + b), state.slowdowns


def recheck(
    opt: Policy, state: VOIState, est: Mapping[int, Estimate], leader: int, cv2: float
) -> tuple[float, int] | None:
    """A converged batch size with one run that is worth running again, and the value of that.

    A run that fell in a slow recurrence rules its batch size out for good when it is the
    batch size's only one: the engine can only tell a slow run by the batch size's earlier
    ones (`Observation.slowdown`), and the first run's check needs a smaller neighbour that ran
    at its usual pace. How often runs slow down, and by how much, is measured (`slow_runs`).
    Whether this one did is judged against what its neighbours predict for it (`neighbours`,
    the walk's prediction, mean ``mu`` and sd ``sd`` of log cost): with ``q`` the chance of a
    slow run and ``s_1..s_k`` the slowdowns seen, its cost ``c`` was slowed by ``s_i`` with
    posterior weight ``w_i`` proportional to ``q / k x phi((log(c / s_i) - mu) / sd)``, and not
    slowed with ``w_0`` proportional to ``(1 - q) x phi((log c - mu) / sd)``. Running it again is
    worth ``sum_i w_i max(0, L - c / s_i) x horizon`` (``L`` the leader's mean cost, horizon
    `ZeusVOIOptimizer.planning_horizon`) less what that run costs beyond the leader,
    ``sum_i w_i c / s_i + w_0 c - L``, within the budget (`ZeusVOIOptimizer.within_budget`). The second run then
    checks the first one's pace (`ZeusVOIOptimizer.moments`). Without a slowdown seen, or a tried neighbour: None
    (a quiet job explores as if there were no second look).
    """
    q, slowdowns = slow_runs(opt, state)
    if not slowdowns:
        return None
    horizon, best_cost = opt.planning_horizon(state), est[leader].mean
    best: tuple[float, int] | None = None
    for b, e in est.items():
        prior = None if b == leader or b in state.rest else neighbours(opt, est, b, cv2)
        if prior is None:
            continue
        mu, sd = prior
        c = max(e.mean, TINY)
        normal = (1.0 - q) * _density((math.log(c) - mu) / sd)
        slowed = [q / len(slowdowns) * _density((math.log(c / s) - mu) / sd) for s in slowdowns]
        total = normal + sum(slowed)
        if total <= 0.0:
            continue
        gain = sum(w * max(0.0, best_cost - c / s) for w, s in zip(slowed, slowdowns, strict=True)) / total
        cost = (normal * c + sum(w * c / s for w, s in zip(slowed, slowdowns, strict=True))) / total
        value = gain * horizon - (cost - best_cost)
        if value > 0 and opt.within_budget(state, est, cost, 1.0, b) and (best is None or value > best[0]):
            best = (value, b)
    return best


def neighbours(opt: Policy, est: Mapping[int, Estimate], batch_size: int, cv2: float) -> tuple[float, float] | None:
    """Mean and sd of the log cost of a tried ``batch_size`` as its tried neighbours predict it.

    The walk's prediction (`ZeusVOIOptimizer.predict`) from the next batch size below and the next above, each
    without ``batch_size``'s own cost, pooled by precision; None where neither was tried.
    """
    bs, i = opt.batch_sizes, opt.batch_sizes.index(batch_size)
    others = {b: e for b, e in est.items() if b != batch_size}
    sides = [
        opt.predict(bs, others, i - step, step, cv2)
        for step in (1, -1)
        if 0 <= i - step < len(bs) and bs[i - step] in others
    ]
    if not sides:
        return None
    precision = sum(1.0 / sd**2 for _, sd in sides)
    return sum(mu / sd**2 for mu, sd in sides) / precision, math.sqrt(1.0 / precision)


def _density(z: float) -> float:
    """Standard normal density (up to its constant, which cancels in a posterior's weights)."""
    return math.exp(-0.5 * z * z)
