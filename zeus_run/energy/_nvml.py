"""GPU energy through NVML, over the device layer (`zeus_run.device`).

Volta and newer GPUs expose a total-energy counter (mJ); we take deltas of it.
Older GPUs only report instantaneous power (mW), which a background thread
samples and integrates. Only the job's GPUs are measured.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType

from zeus_run.device import Gpu, NvidiaGpus
from zeus_run.energy._base import EnergySource
from zeus_run.errors import EnergyError

logger = logging.getLogger(__name__)


def visible_gpu_ids(spec_gpus: Sequence[str] | None, environ: dict[str, str] | None = None) -> list[str] | None:
    """The job's GPUs as NVML identifiers (indices or UUIDs), or None for all.

    The spec's ``energy.gpus`` wins; otherwise ``CUDA_VISIBLE_DEVICES``.

    Raises:
        EnergyError: A MIG device is named (NVML cannot measure MIG slices' energy).
    """
    env = os.environ if environ is None else environ
    if spec_gpus:
        ids = [str(g).strip() for g in spec_gpus]
        source = "energy.gpus"
    elif "CUDA_VISIBLE_DEVICES" in env:
        ids = [g.strip() for g in env["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]
        source = "CUDA_VISIBLE_DEVICES"
    else:
        return None
    for g in ids:
        if g.upper().startswith("MIG-"):
            raise EnergyError(
                f"{source} names MIG device {g!r}: NVML cannot measure the energy of a MIG slice. "
                "Run on a whole GPU, or set energy.source: estimate."
            )
    # CUDA stops at the first invalid entry (e.g. -1); mirror that.
    out = []
    for g in ids:
        if g.lstrip("-").isdigit() and int(g) < 0:
            break
        out.append(g)
    return out


@dataclass
class MeasuredGpu:
    """One of the job's GPUs as the energy source measures it."""

    gpu: Gpu
    max_limit_w: float
    min_limit_w: float
    has_counter: bool
    last_mj: float = 0.0

    @property
    def index(self) -> str:
        return self.gpu.index

    @property
    def name(self) -> str:
        return self.gpu.name

    @property
    def handle(self) -> object:
        return self.gpu.handle


class NvmlEnergy(EnergySource):
    """Sum of the job's GPUs' energy, measured through NVML."""

    name = "nvml"
    estimated = False

    def __init__(
        self,
        gpus: Sequence[str] | None = None,
        nvml: ModuleType | None = None,
        environ: dict[str, str] | None = None,
        poll_interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Args:
            gpus: GPU indices or UUIDs (None: ``CUDA_VISIBLE_DEVICES`` or all GPUs).
            nvml: The pynvml module or a double shaped like it (None: import pynvml).
            environ: Environment to read ``CUDA_VISIBLE_DEVICES`` from (None: os.environ).
            poll_interval: Power sampling period for GPUs without an energy counter (unit: s).
            clock: Monotonic clock for power integration (unit: s).

        Raises:
            EnergyError: NVML is unavailable, a GPU is missing, or a MIG device was selected.
        """
        self._session = NvidiaGpus(nvml)
        self.nvml = self._session.nvml
        self._clock = clock
        self._poll_interval = poll_interval
        try:
            ids = visible_gpu_ids(gpus, environ)
            self.gpus = [self._open(g) for g in (ids if ids is not None else self._all_indices())]
            if not gpus:
                self._warn_on_index_order(ids, os.environ if environ is None else environ)
        except Exception:
            self.close()
            raise
        if not self.gpus:
            self.close()
            raise EnergyError(
                "No GPU selected (CUDA_VISIBLE_DEVICES is empty). Select a GPU or use energy.source: estimate."
            )
        self.invalid_windows = 0
        self._accum_j = 0.0
        self._lock = threading.Lock()
        self._sampler: _PowerSampler | None = None
        polled = [g for g in self.gpus if not g.has_counter]
        for g in self.gpus:
            if g.has_counter:
                g.last_mj = g.gpu.energy_mj()
        if polled:
            self._sampler = _PowerSampler([g.gpu for g in polled], poll_interval, clock)
            self._sampler.start()

    # -- setup ---------------------------------------------------------------------
    def _warn_on_index_order(self, ids: list[str] | None, env: Mapping[str, str]) -> None:
        """Warn when CUDA_VISIBLE_DEVICES indices may name other GPUs than NVML's indices.

        NVML numbers GPUs by PCI bus; CUDA numbers them fastest first unless
        ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. The orders differ only on machines
        with different GPU models, so only those get the warning.
        """
        if not ids or not any(g.isdigit() for g in ids) or env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
            return
        models = self._session.models()
        if len(models) > 1:
            logger.warning(
                "CUDA_VISIBLE_DEVICES=%s uses indices, and this machine has different GPU models (%s): CUDA numbers "
                "them fastest first, NVML by PCI bus, so zeus-run may measure other GPUs than the job uses. "
                "Set CUDA_DEVICE_ORDER=PCI_BUS_ID, or name the GPUs by UUID.",
                ",".join(ids),
                ", ".join(sorted(models)),
            )

    def _all_indices(self) -> list[str]:
        return [str(i) for i in range(self._session.count())]

    def _open(self, ident: str) -> MeasuredGpu:
        gpu = self._session.open(ident)
        if gpu.mig_enabled():
            raise EnergyError(
                f"GPU {ident!r} has MIG mode enabled: NVML cannot measure the energy of MIG slices. "
                "Disable MIG on this GPU or set energy.source: estimate."
            )
        min_mw, max_mw = gpu.limit_constraints_mw()
        try:
            gpu.energy_mj()
            has_counter = True
        except Exception:  # NVMLError_NotSupported on pre-Volta GPUs
            has_counter = False
            logger.info(
                "GPU %s (%s) has no energy counter; sampling its power every %.0f ms",
                ident,
                gpu.name,
                self._poll_interval * 1000,
            )
        return MeasuredGpu(gpu, max_mw / 1000.0, min_mw / 1000.0, has_counter)

    # -- EnergySource ------------------------------------------------------------
    @property
    def method(self) -> str:
        """``counter`` (all GPUs), ``power-sampling`` (none has the counter) or ``counter+power-sampling``."""
        if all(g.has_counter for g in self.gpus):
            return "counter"
        return "power-sampling" if not any(g.has_counter for g in self.gpus) else "counter+power-sampling"

    @property
    def max_power(self) -> float:
        return sum(g.max_limit_w for g in self.gpus)

    def read(self) -> float:
        with self._lock:
            for g in self.gpus:
                if not g.has_counter:
                    continue
                now = g.gpu.energy_mj()
                delta = now - g.last_mj
                if delta < 0:
                    # Counter went backwards: driver reload or reset. The energy of
                    # this window on this GPU is unknown; count none of it.
                    self.invalid_windows += 1
                    logger.warning(
                        "GPU %s energy counter went backwards (%.0f -> %.0f mJ); this measurement window "
                        "is invalid and its energy on that GPU is not counted",
                        g.index,
                        g.last_mj,
                        now,
                    )
                    delta = 0.0
                self._accum_j += delta / 1000.0
                g.last_mj = now
            total = self._accum_j
        if self._sampler is not None:
            total += self._sampler.energy_j()
        return total

    def counter(self) -> float | None:
        """The GPUs' total energy counters, summed (unit: J); None where one has no counter."""
        if not all(g.has_counter for g in self.gpus):
            return None
        try:
            return sum(g.gpu.energy_mj() for g in self.gpus) / 1000.0
        except Exception:  # a device error: no reading
            return None

    def power(self) -> float | None:
        """The job's GPUs' power draw now (NVML's power reading; unit: W), None if a GPU cannot report it."""
        try:
            return sum(g.gpu.power_mw() for g in self.gpus) / 1000.0
        except Exception:  # an NVML error (NotSupported): the caller samples the counter instead
            return None

    def devices(self) -> list[dict[str, str]]:
        out = []
        for g in self.gpus:
            try:
                uuid = g.gpu.uuid()
            except Exception:  # an NVML error: provenance is best effort
                uuid = ""
            out.append({"index": g.index, "name": g.name, "uuid": uuid})
        return out

    def describe(self) -> str:
        names = sorted({g.name for g in self.gpus})
        method = {"counter": "total energy counter", "power-sampling": "power sampling"}.get(
            self.method, "energy counter + power sampling"
        )
        lims = ", ".join(f"{g.min_limit_w:g}-{g.max_limit_w:g} W" for g in self.gpus)
        return f"NVML: {len(self.gpus)} x {'/'.join(names)} (GPUs {','.join(g.index for g in self.gpus)}; {method}; power limits {lims})"

    def close(self) -> None:
        sampler = getattr(self, "_sampler", None)
        if sampler is not None:
            sampler.stop()
            self._sampler = None
        session = getattr(self, "_session", None)
        if session is not None:
            session.close()


class _PowerSampler:
    """Integrates instantaneous power (mW) of some GPUs with the trapezoid rule in a thread."""

    def __init__(self, gpus: list[Gpu], interval: float, clock: Callable[[], float]) -> None:
        self.gpus = gpus
        self.interval = interval
        self.clock = clock
        self._energy_j = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_t = clock()
        self._last_w = self._power_w()
        self._thread = threading.Thread(target=self._loop, name="zeus-run-power-sampler", daemon=True)

    def _power_w(self) -> float:
        return sum(g.power_mw() for g in self.gpus) / 1000.0

    def sample(self) -> None:
        """Take one sample and add the trapezoid since the previous one.

        The reading and the update happen under one lock: the sampling thread and
        `energy_j` (called from the launcher) both sample, and interleaving them
        could apply an older sample after a newer one (negative time step).
        """
        with self._lock:
            t, w = self.clock(), self._power_w()
            dt = t - self._last_t
            if dt > 0:
                self._energy_j += dt * (w + self._last_w) / 2.0
                self._last_t, self._last_w = t, w

    def _loop(self) -> None:
        failed = False
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except Exception as exc:  # a transient NVML error must not kill the sampler
                if not failed:
                    logger.warning("power sampling failed (%s); keeping the last reading until it recovers", exc)
                failed = True

    def start(self) -> None:
        self._thread.start()

    def energy_j(self) -> float:
        """Energy integrated so far, up to now (unit: J)."""
        self.sample()
        with self._lock:
            return self._energy_j

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5 * self.interval + 1.0)
