"""The device layer's two interfaces: `Gpu` (one GPU, what energy and power use) and `GpuLibrary` (NVML).

`Gpu` is the common interface: `zeus_run.energy` reads a GPU's energy and power
through it, and `zeus_run.power` reads and sets its power limit and persistence
mode through it. `zeus_run.device._nvidia.NvidiaGpu` implements it over NVML;
`zeus_run.power._zeusd.ZeusdGpu` implements it with the writes sent to zeusd.

`GpuLibrary` is the shape of the NVML calls `NvidiaGpu` makes: the one boundary
where tests put their double (tests/fake_nvml.py, passed as ``nvml=``).
"""

from __future__ import annotations

from typing import Any, Protocol


class Gpu(Protocol):
    """One GPU as zeus-run uses it. Units as NVML's: energy mJ, power and limits mW.

    Attributes:
        index: The GPU as the job names it (an NVML index or a UUID).
        name: Its model name.
        handle: The library's handle (opaque; for provenance and tests).
        writer: Who applies the writes: ``"NVML"`` or ``"zeusd"``.
    """

    index: str
    name: str
    handle: Any
    writer: str

    def uuid(self) -> str: ...

    def mig_enabled(self) -> bool: ...

    def energy_mj(self) -> float:
        """The total energy counter (raises on GPUs without one: pre-Volta)."""
        ...

    def power_mw(self) -> float: ...

    def limit_constraints_mw(self) -> tuple[int, int]:
        """``(min, max)`` power limit the GPU accepts."""
        ...

    def power_limit_mw(self) -> int: ...

    def set_power_limit_mw(self, mw: int) -> None: ...

    def persistence_mode(self) -> int | None:
        """The persistence mode (1 on), or None where it is not supported."""
        ...

    def set_persistence_mode(self, enabled: bool) -> None: ...

    def is_no_permission(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by a write, means the caller may not change the setting."""
        ...


class GpuLibrary(Protocol):
    """The NVML calls `NvidiaGpu` makes (``pynvml`` has this shape).

    Handles are opaque. Units: energy mJ, power and limits mW.
    """

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None: ...

    def nvmlDeviceGetCount(self) -> int: ...

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any: ...

    def nvmlDeviceGetName(self, handle: Any) -> Any: ...

    def nvmlDeviceGetUUID(self, handle: Any) -> Any: ...

    def nvmlDeviceGetMigMode(self, handle: Any) -> tuple[int, int]: ...

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int: ...

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Any) -> tuple[int, int]: ...

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int: ...

    def nvmlDeviceSetPowerManagementLimit(self, handle: Any, limit_mw: int) -> None: ...

    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int: ...

    def nvmlDeviceSetPersistenceMode(self, handle: Any, mode: int) -> None: ...
