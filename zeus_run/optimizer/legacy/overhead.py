"""zeus-voi's steady costs (revision 9): a batch size is learnt without its first run's power-limit sweep.

The first run of a batch size also sweeps the GPUs' power limits (`zeus_run.power.JitProfiler`):
part of it runs at limits other than the one chosen, which later runs of the batch size never
do. Where a job reaches its target in a few epochs, that sweep is a large share of the run
(15-18% on sentiment140 on an A40). Revisions 1-8 learn from the cost paid, so every batch
size's first run looks dearer than the batch size is, and a walk that compares first runs sees
flattened differences: a gentle rise looks like noise worth probing past.

Revision 9 learns each run's cost less what its sweep cost beyond the same work at the chosen
limit, which the launcher's profiler prices (`zeus_run.power.JitProfiler.overhead`) and the
trial's record carries (``profile_overhead``; the simulator prices it the same way). A probe is
charged the overhead share its nearest batch size tried paid: an untried batch size will pay a
sweep too. The budget (`LegacyVOIOptimizer.within_budget`) still counts what was paid.

Functions of the optimizer's state, pure as its fold is.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from zeus_run.optimizer._stats import TINY

if TYPE_CHECKING:
    from zeus_run.optimizer._base import Observation
    from zeus_run.optimizer.legacy.voi import LegacyVOIOptimizer, VOIState


def without_sweep(state: VOIState, obs: Observation) -> tuple[VOIState, Observation]:
    """The observation at its steady cost (its sweep's overhead left out), and the state with the
    batch size's overhead share (overhead over steady cost) recorded; as they are without an overhead."""
    if obs.overhead <= 0:
        return state, obs
    steady = max(obs.cost - obs.overhead, TINY)
    shares = {**state.overheads, obs.batch_size: obs.overhead / steady}
    return dataclasses.replace(state, overheads=shares), dataclasses.replace(obs, cost=steady)


def overhead_share(opt: LegacyVOIOptimizer, state: VOIState, batch_size: int) -> float:
    """The share of its steady cost that ``batch_size``'s first run will pay for its sweep: the share
    the nearest batch size with a recorded overhead paid (0 before any did)."""
    if not state.overheads:
        return 0.0
    i = opt.batch_sizes.index(batch_size)
    nearest = min(state.overheads, key=lambda b: (abs(opt.batch_sizes.index(b) - i), b))
    return state.overheads[nearest]
