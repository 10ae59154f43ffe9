"""Energy sources: NVML on NVIDIA GPUs, RAPL for CPU packages and DRAM, or a clearly labelled estimate elsewhere."""

from __future__ import annotations

import logging
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from zeus_run.contract import have_proc
from zeus_run.energy._base import EnergySource
from zeus_run.energy._estimate import EstimatedEnergy
from zeus_run.energy._nvml import NvmlEnergy, visible_gpu_ids
from zeus_run.energy._rapl import RaplEnergy, SumEnergy, rapl_status
from zeus_run.energy._self import SelfMeter, ask_reading, meter_settings, own_cpu_seconds, parse_ask_reading
from zeus_run.errors import EnergyError

if TYPE_CHECKING:  # a training process that measures itself does not load the spec's schema
    from zeus_run.spec import EnergySettings

logger = logging.getLogger(__name__)


def open_energy_source(
    settings: EnergySettings, nvml: ModuleType | None = None, powercap: Path | None = None
) -> EnergySource:
    """Open the source a spec asks for.

    ``auto`` tries NVML, then RAPL (CPU package and DRAM counters), and falls back to the
    estimate when neither is usable; it logs which it picked and why. ``energy.include``
    adds RAPL's ``cpu``/``dram`` domains to the GPUs' energy (unreadable: a warning, and the
    GPUs alone are counted).

    Args:
        settings: The spec's ``energy`` section.
        nvml: A pynvml double (None: the real module).
        powercap: The powercap root (None: `zeus_run.energy._rapl.powercap_root`).

    Raises:
        EnergyError: ``nvml`` or ``rapl`` was asked for explicitly and is unusable, or a MIG device is selected.
    """
    basis = settings.basis
    if basis == "cpu-time" and not have_proc():
        logger.info("energy: no /proc here to read the trial's CPU time; the estimate charges wall time")
        basis = "wall-time"
    if settings.source == "estimate":
        return EstimatedEnergy(settings.watts, basis=basis)
    cpu_domains = tuple(d for d in settings.include if d != "gpu") or ("cpu", "dram")
    if settings.source == "rapl":
        try:
            return RaplEnergy(cpu_domains, powercap, settings.watts)
        except EnergyError as exc:
            raise EnergyError(f"{exc} Or set energy.source: estimate for the labelled estimate.") from None
    source: EnergySource
    try:
        source = NvmlEnergy(settings.gpus, nvml=nvml)
    except EnergyError as exc:
        if settings.source == "nvml" or "MIG" in str(exc):
            raise
        try:
            source = RaplEnergy(cpu_domains, powercap, settings.watts)
        except EnergyError as rapl_exc:
            logger.info(
                "energy: NVML unavailable (%s) and RAPL unusable (%s); using an estimate of %g W x %s",
                exc,
                rapl_exc,
                settings.watts,
                basis,
            )
            return EstimatedEnergy(settings.watts, basis=basis)
        logger.info("energy: NVML unavailable (%s); measuring %s", exc, source.describe())
        return source
    extra = tuple(d for d in settings.include if d != "gpu")
    if extra:
        try:
            source = SumEnergy([source, RaplEnergy(extra, powercap, settings.watts)])
        except EnergyError as exc:
            logger.warning("energy.include %s: %s; counting the GPUs only", list(extra), exc)
    logger.info("energy: %s", source.describe())
    return source


def gpu_source(energy: EnergySource) -> NvmlEnergy | None:
    """The NVML GPUs an energy source measures (alone or with RAPL), or None."""
    if isinstance(energy, NvmlEnergy):
        return energy
    if isinstance(energy, SumEnergy):
        return next((p for p in energy.parts if isinstance(p, NvmlEnergy)), None)
    return None


__all__ = [
    "EnergySource",
    "EstimatedEnergy",
    "NvmlEnergy",
    "RaplEnergy",
    "SelfMeter",
    "SumEnergy",
    "ask_reading",
    "gpu_source",
    "meter_settings",
    "open_energy_source",
    "own_cpu_seconds",
    "parse_ask_reading",
    "rapl_status",
    "visible_gpu_ids",
]
