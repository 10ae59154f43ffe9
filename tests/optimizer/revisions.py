"""``zeus-voi`` at any revision, as the tests of one revision against another build it: the live policy at the
current revision (`zeus_run.optimizer.voi`), the legacy room's before it (`zeus_run.optimizer.legacy`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zeus_run.optimizer import REVISION, REVISION_10, LegacyVOIOptimizer, ZeusVOIOptimizer
from zeus_run.optimizer.legacy import rev10


def voi(batch_sizes: Iterable[int], default_batch_size: int, revision: int = REVISION, **kw: Any) -> Any:
    """``zeus-voi`` at ``revision`` (keyword arguments: the constructor's of that revision's class)."""
    if revision == REVISION:
        return ZeusVOIOptimizer(batch_sizes, default_batch_size, **kw)
    if revision == REVISION_10:
        return rev10.ZeusVOIOptimizer(batch_sizes, default_batch_size, **kw)
    return LegacyVOIOptimizer(batch_sizes, default_batch_size, revision=revision, **kw)
