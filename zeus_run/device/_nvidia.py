"""NVIDIA GPUs through NVML: the only module that imports ``pynvml`` (nvidia-ml-py)."""

from __future__ import annotations

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


def is_mig_enabled(nvml: Any, handle: Any) -> bool:
    """Whether the GPU runs in MIG mode (NVML cannot measure a MIG slice's energy)."""
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except Exception:  # NotSupported: GPU without MIG
        return False
    return bool(current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1))


def is_no_permission(nvml: Any, exc: BaseException) -> bool:
    """Whether an NVML error means the caller may not change the setting (not root)."""
    no_perm = getattr(nvml, "NVMLError_NoPermission", None)
    return isinstance(no_perm, type) and isinstance(exc, no_perm)


def device_text(v: Any) -> str:
    """A device name or UUID as text (older pynvml returns bytes)."""
    return v.decode() if isinstance(v, bytes) else str(v)
