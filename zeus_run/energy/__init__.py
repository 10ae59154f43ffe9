"""Energy sources: NVML on NVIDIA GPUs, or a clearly labelled estimate elsewhere."""

from __future__ import annotations

import logging
from types import ModuleType

from zeus_run.energy._base import EnergySource
from zeus_run.energy._estimate import EstimatedEnergy
from zeus_run.energy._nvml import NvmlEnergy, visible_gpu_ids
from zeus_run.errors import EnergyError
from zeus_run.proctree import have_proc
from zeus_run.spec import EnergySettings

logger = logging.getLogger(__name__)


def open_energy_source(settings: EnergySettings, nvml: ModuleType | None = None) -> EnergySource:
    """Open the source a spec asks for.

    ``auto`` tries NVML and falls back to the estimate when NVML does not
    initialize (no driver, no GPU); either way it logs which it picked.

    Raises:
        EnergyError: ``nvml`` was asked for explicitly and is unusable, or a MIG device is selected.
    """
    basis = settings.basis
    if basis == "cpu-time" and not have_proc():
        logger.info("energy: no /proc here to read the trial's CPU time; the estimate charges wall time")
        basis = "wall-time"
    if settings.source == "estimate":
        return EstimatedEnergy(settings.watts, basis=basis)
    try:
        source = NvmlEnergy(settings.gpus, nvml=nvml)
    except EnergyError as exc:
        if settings.source == "nvml" or "MIG" in str(exc):
            raise
        logger.info("energy: NVML unavailable (%s); using an estimate of %g W x %s", exc, settings.watts, basis)
        return EstimatedEnergy(settings.watts, basis=basis)
    logger.info("energy: %s", source.describe())
    return source


__all__ = ["EnergySource", "EstimatedEnergy", "NvmlEnergy", "open_energy_source", "visible_gpu_ids"]
