"""``zeus-voi`` revisions 10 and 11, frozen: the default policy before revision 12, for the run directories recorded
under them (`zeus_run.optimizer.voi` is the live revision).

Revision 10 (``policy``, its rooms ``walk``, ``laws``, ``looks``, ``bandit``, ``warm``, ``state``) closed a
direction where its laws from six jobs said no probe could pay ("epochs to the target never fall as the batch size
grows"), counted a failed probe on one side against the chance that a batch size on the other converges, and drew
every probe from one budget: one probe below the default that did not converge could end the walk upwards for good.
Revision 11 (``transfer``, opt-in) is revision 10 with a warm start that prices a batch size as its epochs carried
over times its pace here; cold it decided as revision 10, and warm it was not better (docs/benchmarks.md). It is no
longer offered: a spec naming it still builds it, so that run directories recorded under it resume and replay.
"""

from __future__ import annotations

from zeus_run.optimizer.legacy.rev10.policy import REVISION, ZeusVOIOptimizer
from zeus_run.optimizer.legacy.rev10.state import Estimate, VOIState, WarmStart
from zeus_run.optimizer.legacy.rev10.transfer import REVISION as TRANSFER_REVISION
from zeus_run.optimizer.legacy.rev10.transfer import TransferVOIOptimizer

__all__ = [
    "REVISION",
    "TRANSFER_REVISION",
    "Estimate",
    "TransferVOIOptimizer",
    "VOIState",
    "WarmStart",
    "ZeusVOIOptimizer",
]
