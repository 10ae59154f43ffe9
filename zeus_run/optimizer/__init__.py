"""Batch-size optimizers. Each is configuration plus a pure fold over observations."""

from __future__ import annotations

from zeus_run.optimizer._base import BatchSizeOptimizer, Decision, Observation
from zeus_run.optimizer._gts import ArmStats, posterior, sample_means
from zeus_run.optimizer._pruning import PruningState
from zeus_run.optimizer._voi import Estimate, VOIState, ZeusVOIOptimizer
from zeus_run.optimizer._warm import WarmStart
from zeus_run.optimizer._zeus import ZeusOptimizer, ZeusState
from zeus_run.optimizer._zeus_plus import CostAwarePruningState, ZeusPlusOptimizer
from zeus_run.optimizer.power_limit import (
    JITPowerLimitOptimizer,
    PowerLimitMeasurement,
    PowerLimitState,
    best_power_limit,
)
from zeus_run.spec import OptimizerSettings

#: Policy name (``optimizer.policy``) -> optimizer class.
POLICIES: dict[str, type[ZeusOptimizer] | type[ZeusVOIOptimizer]] = {
    ZeusOptimizer.name: ZeusOptimizer,
    ZeusPlusOptimizer.name: ZeusPlusOptimizer,
    ZeusVOIOptimizer.name: ZeusVOIOptimizer,
}


def make_optimizer(
    settings: OptimizerSettings,
    batch_sizes: tuple[int, ...],
    default_batch_size: int,
    seed: int,
    horizon: int | None = None,
    warm: WarmStart | None = None,
    lifetime: int | None = None,
) -> BatchSizeOptimizer:
    """Build the optimizer a spec asks for.

    Args:
        settings: The spec's ``optimizer`` section.
        batch_sizes: Feasible batch sizes.
        default_batch_size: b0.
        seed: Seed of the optimizer's draws.
        horizon: The job's recurrences (None: open-ended or unknown).
        warm: The warm start's source (``optimizer.warm_from``; `zeus_run.optimizer._warm`): ``zeus-voi``
            revision 10 and later only.
        lifetime: An open-ended job's expected recurrences (the spec's ``lifetime``; None: the default).

    Raises:
        ValueError: Unknown policy name, invalid knobs, or a warm start for a policy that has none.
    """
    try:
        cls = POLICIES[settings.policy]
    except KeyError:
        raise ValueError(f"unknown optimizer policy {settings.policy!r}; known: {', '.join(POLICIES)}") from None
    opt: BatchSizeOptimizer
    if warm is not None:
        if cls is not ZeusVOIOptimizer:
            raise ValueError(f"a warm start needs the zeus-voi policy (revision 10 or later), not {settings.policy}")
        opt = ZeusVOIOptimizer(
            batch_sizes,
            default_batch_size,
            seed=seed,
            window_size=settings.window_size,
            horizon=horizon,
            revision=settings.revision,
            warm=warm,
        )
        return opt if lifetime is None else opt.with_horizon(horizon, lifetime)
    opt = cls(
        batch_sizes,
        default_batch_size,
        seed=seed,
        pruning_rounds=settings.pruning_rounds,
        window_size=settings.window_size,
        prior_mean=settings.prior_mean,
        prior_precision=settings.prior_precision,
        num_explorations=settings.num_explorations,
        horizon=horizon,
        revision=settings.revision,
    )
    return opt if lifetime is None else opt.with_horizon(horizon, lifetime)


__all__ = [
    "POLICIES",
    "ArmStats",
    "BatchSizeOptimizer",
    "CostAwarePruningState",
    "Decision",
    "Estimate",
    "JITPowerLimitOptimizer",
    "Observation",
    "PowerLimitMeasurement",
    "PowerLimitState",
    "PruningState",
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
