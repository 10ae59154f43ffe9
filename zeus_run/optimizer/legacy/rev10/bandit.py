"""zeus-voi's bandit with a horizon (revision 10): another run of a batch size only where it can pay.

Revisions 1-9 exploit with tempered Thompson Sampling: each arm's mean cost is drawn from its
posterior at half its width and the cheapest draw runs. Its exploration does not know how many
recurrences are left: on a short horizon it samples close arms as often as on a long one, though
fewer recurrences remain to use what it learns.

Revision 10 runs the cheapest arm (the leader) unless one more run of another arm is worth what it
costs, the knowledge gradient of that run: one more run of arm ``b`` (posterior mean ``m``, variance
of that mean ``v``, one run's variance ``cv2 m^2``) moves its posterior mean by a normal amount of
sd ``s = v / sqrt(v + cv2 m^2)``; if the moved mean falls below the leader's ``L``, the saving
``L - m'`` is made on every recurrence left (`ZeusVOIOptimizer.planning_horizon`). The run is worth
``E[max(0, L - m')] x horizon - (m - L)``, and the arm with the most value positive runs. With many
recurrences left this explores as long as the arms' posteriors overlap; with few, only where they
are wide. The walk is re-examined before each decision, as before.

Its decisions are stage ``exploit`` (revision 10 recorded them as ``thompson``, though nothing is drawn; the
two names mean the same: `zeus_run.views.summary.EXPLORING_STAGES` counts neither as exploration). Pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from zeus_run.optimizer._base import Decision
from zeus_run.optimizer._stats import normal_cdf
from zeus_run.optimizer.legacy.rev10.state import Estimate

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def normal_shortfall(mean: float, sd: float, target: float) -> float:
    """``E[max(0, target - X)]`` for ``X ~ N(mean, sd^2)``."""
    if sd <= 0.0:
        return max(0.0, target - mean)
    z = (target - mean) / sd
    return (target - mean) * normal_cdf(z) + sd * _INV_SQRT_2PI * math.exp(-0.5 * z * z)


def exploit(est: Mapping[int, Estimate], arms: tuple[int, ...], cv2: float, horizon: float) -> Decision:
    """The leader, unless one more run of another arm is worth what it costs over ``horizon`` recurrences.

    Args:
        est: Posterior of each converged arm's mean cost (unit: J).
        arms: The converged batch sizes.
        cv2: Pooled relative variance of one run's cost.
        horizon: Discounted recurrences after this one (`ZeusVOIOptimizer.planning_horizon`).
    """
    leader = min(arms, key=lambda b: est[b].mean)
    top = est[leader].mean
    best: tuple[float, int] | None = None
    for b in arms:
        if b == leader:
            continue
        m, v = est[b]
        s = v / math.sqrt(v + cv2 * m * m)  # how far one more run moves its posterior mean
        value = normal_shortfall(m, s, top) * horizon - (m - top)
        if value > 0 and (best is None or value > best[0]):
            best = (value, b)
    if best is None:
        return Decision(leader, "exploit", f"the cheapest, {top:.4g} J: no other run can pay")
    return Decision(best[1], "exploit", f"one more run is worth {best[0]:.4g} J over the recurrences left")
