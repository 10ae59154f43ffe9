"""Batch-size optimizers. Each is configuration plus a pure fold over observations."""

from __future__ import annotations

from zeus_run.optimizer._base import BatchSizeOptimizer, Decision, Observation
from zeus_run.optimizer._gts import ArmStats, posterior, sample_means
from zeus_run.optimizer._pruning import PruningState
from zeus_run.optimizer._zeus import ZeusOptimizer, ZeusState
from zeus_run.optimizer._zeus_plus import CostAwarePruningState, ZeusPlusOptimizer
from zeus_run.optimizer.legacy import REVISIONS as LEGACY_REVISIONS
from zeus_run.optimizer.legacy import LegacyVOIOptimizer, rev10
from zeus_run.optimizer.power_limit import (
    JITPowerLimitOptimizer,
    PowerLimitMeasurement,
    PowerLimitState,
    best_power_limit,
)
from zeus_run.optimizer.voi import REVISION, Estimate, VOIState, WarmStart, ZeusVOIOptimizer
from zeus_run.spec import OptimizerSettings

#: Policy name (``optimizer.policy``) -> its class at the current revision.
POLICIES: dict[str, type[ZeusOptimizer] | type[ZeusVOIOptimizer]] = {
    ZeusOptimizer.name: ZeusOptimizer,
    ZeusPlusOptimizer.name: ZeusPlusOptimizer,
    ZeusVOIOptimizer.name: ZeusVOIOptimizer,
}

#: Revision 10, the default before revision 12, frozen (`zeus_run.optimizer.legacy.rev10`).
REVISION_10 = rev10.REVISION
#: Revision 11, revision 10 with another warm start, no longer offered (`zeus_run.optimizer.legacy.rev10.transfer`):
#: built only for the run directories recorded under it.
TRANSFER_REVISION = rev10.TRANSFER_REVISION
TransferVOIOptimizer = rev10.TransferVOIOptimizer

#: ``zeus-voi``'s revisions: the frozen ones (`zeus_run.optimizer.legacy`) and the live one (`zeus_run.optimizer.voi`).
REVISIONS = (*LEGACY_REVISIONS, REVISION_10, TRANSFER_REVISION, REVISION)


def _frozen_warm(warm: WarmStart | None) -> rev10.WarmStart | None:
    """A warm start's source as revisions 10 and 11 read it (their own frozen copy of the class)."""
    return None if warm is None else rev10.WarmStart(warm.source, warm.fingerprint, warm.observations)


def make_optimizer(
    settings: OptimizerSettings,
    batch_sizes: tuple[int, ...],
    default_batch_size: int,
    seed: int,
    horizon: int | None = None,
    warm: WarmStart | None = None,
    lifetime: int | None = None,
) -> BatchSizeOptimizer:
    """Build the optimizer a spec asks for; each policy reads its own knobs from ``settings`` (``from_settings``).

    Args:
        settings: The spec's ``optimizer`` section.
        batch_sizes: Feasible batch sizes.
        default_batch_size: b0.
        seed: Seed of the optimizer's draws.
        horizon: The job's recurrences (None: open-ended or unknown).
        warm: The warm start's source (``optimizer.warm_from``; `zeus_run.optimizer.voi.warm`): ``zeus-voi``
            revision 10 and later only.
        lifetime: An open-ended job's expected recurrences (the spec's ``lifetime``; None: the default).

    Raises:
        ValueError: Unknown policy name or revision, invalid knobs, or a warm start for a policy that has none.
    """
    try:
        cls = POLICIES[settings.policy]
    except KeyError:
        raise ValueError(f"unknown optimizer policy {settings.policy!r}; known: {', '.join(POLICIES)}") from None
    voi = cls is ZeusVOIOptimizer
    if warm is not None and not voi:
        raise ValueError(f"a warm start needs the zeus-voi policy (revision 10 or later), not {settings.policy}")
    if warm is not None and settings.revision in LEGACY_REVISIONS:
        raise ValueError(f"a warm start needs revision 10 or later, not {settings.revision}")
    opt: BatchSizeOptimizer
    if not voi:
        opt = cls.from_settings(settings, batch_sizes, default_batch_size, seed)
    elif settings.revision == REVISION:
        opt = ZeusVOIOptimizer.from_settings(settings, batch_sizes, default_batch_size, seed, horizon, warm)
    elif settings.revision == REVISION_10:
        frozen = _frozen_warm(warm)
        opt = rev10.ZeusVOIOptimizer.from_settings(settings, batch_sizes, default_batch_size, seed, horizon, frozen)
    elif settings.revision == TRANSFER_REVISION:
        frozen = _frozen_warm(warm)
        opt = TransferVOIOptimizer.from_settings(settings, batch_sizes, default_batch_size, seed, horizon, frozen)
    elif settings.revision in LEGACY_REVISIONS:
        opt = LegacyVOIOptimizer.from_settings(settings, batch_sizes, default_batch_size, seed, horizon)
    else:
        raise ValueError(f"revision must be one of {REVISIONS}, got {settings.revision}")
    return opt if lifetime is None else opt.with_horizon(horizon, lifetime)


__all__ = [
    "LEGACY_REVISIONS",
    "POLICIES",
    "REVISION",
    "REVISIONS",
    "REVISION_10",
    "TRANSFER_REVISION",
    "ArmStats",
    "BatchSizeOptimizer",
    "CostAwarePruningState",
    "Decision",
    "Estimate",
    "JITPowerLimitOptimizer",
    "LegacyVOIOptimizer",
    "Observation",
    "PowerLimitMeasurement",
    "PowerLimitState",
    "PruningState",
    "TransferVOIOptimizer",
    "VOIState",
    "WarmStart",
    "ZeusOptimizer",
    "ZeusPlusOptimizer",
    "ZeusState",
    "ZeusVOIOptimizer",
    "best_power_limit",
    "make_optimizer",
    "posterior",
    "sample_means",
]
