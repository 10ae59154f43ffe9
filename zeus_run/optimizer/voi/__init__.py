"""``zeus-voi``, the default policy, at its current revision (`zeus_run.optimizer.voi.policy`).

Its rooms, each importing only `zeus_run.optimizer.voi.state` of this package (the policy imports them all):
``state`` (what it learns, its estimates, the face of the policy the stages read), ``walk`` (the candidates of
a probe and their predicted costs), ``laws`` (their value, bounded by the laws of epochs and pace, and the
jumps), ``looks`` (second looks at a run that may have been slow), ``bandit`` (exploitation with a horizon),
``warm`` (the warm start). Earlier revisions: `zeus_run.optimizer.legacy`.
"""

from __future__ import annotations

from zeus_run.optimizer.voi.policy import REVISION, ZeusVOIOptimizer
from zeus_run.optimizer.voi.state import Estimate, VOIState, WarmStart

__all__ = ["REVISION", "Estimate", "VOIState", "WarmStart", "ZeusVOIOptimizer"]
