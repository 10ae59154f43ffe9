"""NVIDIA GPUs through NVML: the only module that imports ``pynvml`` (nvidia-ml-py).

`NvidiaGpus` is one NVML session (``nvmlInit`` .. ``nvmlShutdown``) that opens
`NvidiaGpu` objects, the `zeus_run.device.Gpu` implementation for NVIDIA.
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

from zeus_run.errors import EnergyError


def import_nvml() -> ModuleType:
    """Import ``pynvml`` (from nvidia-ml-py). Separate so tests can inject a double."""
    import pynvml

    return pynvml


def open_library(nvml: Any | None = None) -> Any:
    """``nvml`` if given (a test double), else the imported ``pynvml``.

    Raises:
        EnergyError: nvidia-ml-py is not installed.
    """
    if nvml is not None:
        return nvml
    try:
        return import_nvml()
    except ImportError as exc:
        raise EnergyError(
            "nvidia-ml-py is not installed (import pynvml failed). `pip install nvidia-ml-py`, or use energy.source: estimate."
        ) from exc


def device_text(v: Any) -> str:
    """A device name or UUID as text (older pynvml returns bytes)."""
    return v.decode() if isinstance(v, bytes) else str(v)


class NvidiaGpu:
    """One NVIDIA GPU through NVML (a `zeus_run.device.Gpu`)."""

    writer = "NVML"

    def __init__(self, nvml: Any, handle: Any, index: str) -> None:
        self.nvml = nvml
        self.handle = handle
        self.index = index
        self.name = device_text(nvml.nvmlDeviceGetName(handle))

    def uuid(self) -> str:
        return device_text(self.nvml.nvmlDeviceGetUUID(self.handle))

    def mig_enabled(self) -> bool:
        try:
            current, _pending = self.nvml.nvmlDeviceGetMigMode(self.handle)
        except Exception:  # NotSupported: a GPU without MIG
            return False
        return bool(current == getattr(self.nvml, "NVML_DEVICE_MIG_ENABLE", 1))

    def energy_mj(self) -> float:
        return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))

    def power_mw(self) -> float:
        return float(self.nvml.nvmlDeviceGetPowerUsage(self.handle))

    def limit_constraints_mw(self) -> tuple[int, int]:
        lo, hi = self.nvml.nvmlDeviceGetPowerManagementLimitConstraints(self.handle)
        return int(lo), int(hi)

    def power_limit_mw(self) -> int:
        return int(self.nvml.nvmlDeviceGetPowerManagementLimit(self.handle))

    def set_power_limit_mw(self, mw: int) -> None:
        self.nvml.nvmlDeviceSetPowerManagementLimit(self.handle, int(mw))

    def persistence_mode(self) -> int | None:
        try:
            return int(self.nvml.nvmlDeviceGetPersistenceMode(self.handle))
        except Exception:  # not supported (e.g. Windows)
            return None

    def set_persistence_mode(self, enabled: bool) -> None:
        on, off = getattr(self.nvml, "NVML_FEATURE_ENABLED", 1), getattr(self.nvml, "NVML_FEATURE_DISABLED", 0)
        self.nvml.nvmlDeviceSetPersistenceMode(self.handle, on if enabled else off)

    def is_no_permission(self, exc: BaseException) -> bool:
        no_perm = getattr(self.nvml, "NVMLError_NoPermission", None)
        return isinstance(no_perm, type) and isinstance(exc, no_perm)


class NvidiaGpus:
    """One NVML session: opens the GPUs, shuts NVML down on `close`.

    Args:
        nvml: pynvml or a double shaped like it (None: import pynvml).

    Raises:
        EnergyError: nvidia-ml-py is missing, or NVML does not initialize (no driver, no GPU).
    """

    def __init__(self, nvml: Any | None = None) -> None:
        self.nvml = open_library(nvml)
        try:
            self.nvml.nvmlInit()
        except Exception as exc:  # NVMLError and friends: no driver, no GPU
            raise EnergyError(
                f"NVML did not initialize ({exc}). No NVIDIA driver or GPU here; use energy.source: estimate."
            ) from exc
        self._open = True

    def count(self) -> int:
        return int(self.nvml.nvmlDeviceGetCount())

    def open(self, ident: str) -> NvidiaGpu:
        """The GPU with NVML index or UUID ``ident``.

        Raises:
            EnergyError: No such GPU.
        """
        n = self.nvml
        try:
            handle = n.nvmlDeviceGetHandleByIndex(int(ident)) if ident.isdigit() else n.nvmlDeviceGetHandleByUUID(ident)
        except Exception as exc:
            raise EnergyError(
                f"GPU {ident!r} not found through NVML ({exc}). Check CUDA_VISIBLE_DEVICES or energy.gpus."
            ) from exc
        return NvidiaGpu(n, handle, ident)

    def models(self) -> set[str]:
        """The model names of every GPU on the machine."""
        return {self.open(str(i)).name for i in range(self.count())}

    def close(self) -> None:
        if self._open:
            self._open = False
            with contextlib.suppress(Exception):  # already shut down
                self.nvml.nvmlShutdown()
