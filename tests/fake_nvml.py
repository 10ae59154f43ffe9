"""A test double shaped like ``pynvml`` (nvidia-ml-py), injected where zeus-run imports NVML.

`FakeNvml` instances expose the module-level functions and constants that
zeus-run uses. GPUs are `FakeGpu` objects whose energy counter and power
draw are scriptable: set ``energy_mj`` / ``power_mw`` directly, or give
``power_fn(t, limit_w) -> W``, in which case the counter integrates it over a
(possibly fake) clock. ``update_ms`` makes the total-energy counter behave like
real NVML's: it advances only every ``update_ms`` milliseconds of the clock, each
reading reporting the energy at the last update. Every set call can be appended to ``log_path`` (one
JSON line each), so a test can see what a subprocess did to the GPUs.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


class NVMLError(Exception):
    def __init__(self, value: int = 999) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def _error(name: str, code: int, text: str) -> type:
    """A subclass of NVMLError named like pynvml's (which also generates them from codes)."""

    def init(self: NVMLError) -> None:
        NVMLError.__init__(self, code)

    return type(name, (NVMLError,), {"__init__": init, "__str__": lambda self: text})


NVMLError_NoPermission = _error("NVMLError_NoPermission", 4, "Insufficient Permissions")
NVMLError_NotSupported = _error("NVMLError_NotSupported", 3, "Not Supported")
NVMLError_InvalidArgument = _error("NVMLError_InvalidArgument", 2, "Invalid Argument")
NVMLError_DriverNotLoaded = _error("NVMLError_DriverNotLoaded", 9, "Driver Not Loaded")


@dataclass
class FakeGpu:
    """One GPU. Power values in mW, energy in mJ, as NVML reports them."""

    name: str = "NVIDIA A40"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    min_mw: int = 100_000
    max_mw: int = 300_000
    limit_mw: int | None = None
    has_counter: bool = True
    energy_mj: float = 0.0
    power_mw: float = 100_000.0
    power_fn: Callable[[float, float], float] | None = None  # (t s, limit W) -> W
    mig: bool = False
    persistence: int = 0
    update_ms: float | None = None  # the counter's update period (None: continuous)
    _t: float | None = field(default=None, repr=False)
    _update: int = field(default=-1, repr=False)  # index of the counter update last reported
    _reported: int = field(default=0, repr=False)  # the counter at that update (unit: mJ)

    def __post_init__(self) -> None:
        if self.limit_mw is None:
            self.limit_mw = self.max_mw


class FakeNvml:
    """Module-shaped NVML double."""

    NVMLError = NVMLError
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_FEATURE_DISABLED = 0
    NVML_FEATURE_ENABLED = 1

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        root: bool = True,
        driver: bool = True,
        clock: Callable[[], float] = time.monotonic,
        log_path: str | None = None,
        fail_set_after: int | None = None,
    ) -> None:
        self.gpus = gpus if gpus is not None else [FakeGpu()]
        self.root = root
        self.driver = driver
        self.clock = clock
        self.log_path = log_path
        self.fail_set_after = fail_set_after
        self.init_count = 0
        self.calls: list[tuple] = []  # ("limit", index, mW) / ("persistence", index, mode)
        self.lock = threading.Lock()

    # -- plumbing ------------------------------------------------------------------
    def _record(self, *call) -> None:
        self.calls.append(call)
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(list(call)) + "\n")

    def _gpu(self, handle) -> FakeGpu:
        if self.init_count <= 0:
            raise NVMLError(1)  # uninitialized
        return self.gpus[handle]

    def _settable(self, handle) -> FakeGpu:
        """The GPU behind ``handle``, if this process may change its settings (NVML's root check)."""
        g = self._gpu(handle)
        if not self.root:
            raise NVMLError_NoPermission()
        return g

    def _advance(self, g: FakeGpu) -> None:
        if g.power_fn is None:
            return
        now = self.clock()
        if g._t is not None:
            g.energy_mj += g.power_fn(now, g.limit_mw / 1000.0) * (now - g._t) * 1000.0
        g._t = now
        g.power_mw = g.power_fn(now, g.limit_mw / 1000.0) * 1000.0

    # -- the pynvml surface ----------------------------------------------------------
    def nvmlInit(self) -> None:
        if not self.driver:
            raise NVMLError_DriverNotLoaded()
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        if self.init_count <= 0:
            raise NVMLError(1)
        self.init_count -= 1

    def nvmlDeviceGetCount(self) -> int:
        if self.init_count <= 0:
            raise NVMLError(1)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int):
        if self.init_count <= 0:
            raise NVMLError(1)
        if not 0 <= i < len(self.gpus):
            raise NVMLError_InvalidArgument()
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if self.init_count <= 0:
            raise NVMLError(1)
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        for i, g in enumerate(self.gpus):
            if g.uuid == uuid:
                return i
        raise NVMLError(13)  # NOT_FOUND

    def nvmlDeviceGetName(self, h) -> str:
        return self._gpu(h).name

    def nvmlDeviceGetUUID(self, h) -> str:
        return self._gpu(h).uuid

    def nvmlDeviceGetMigMode(self, h):
        g = self._gpu(h)
        m = self.NVML_DEVICE_MIG_ENABLE if g.mig else self.NVML_DEVICE_MIG_DISABLE
        return [m, m]

    def nvmlDeviceGetTotalEnergyConsumption(self, h) -> int:
        g = self._gpu(h)
        if not g.has_counter:
            raise NVMLError_NotSupported()
        with self.lock:
            self._advance(g)
            if g.update_ms is None or g._t is None:
                return int(g.energy_mj)
            update = int(g._t // (g.update_ms / 1000.0))  # the last update, at or before now
            if update != g._update:
                boundary = update * g.update_ms / 1000.0
                g._update, g._reported = update, int(g.energy_mj - g.power_mw * (g._t - boundary))
            return g._reported

    def nvmlDeviceGetPowerUsage(self, h) -> int:
        g = self._gpu(h)
        with self.lock:
            self._advance(g)
            return int(g.power_mw)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        g = self._gpu(h)
        return [g.min_mw, g.max_mw]

    def nvmlDeviceGetPowerManagementLimit(self, h) -> int:
        return self._gpu(h).limit_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h) -> int:
        return self._gpu(h).max_mw

    def nvmlDeviceSetPowerManagementLimit(self, h, mw: int) -> None:
        g = self._settable(h)
        if self.fail_set_after is not None:
            if self.fail_set_after <= 0:
                raise NVMLError(999)
            self.fail_set_after -= 1
        if not g.min_mw <= mw <= g.max_mw:
            raise NVMLError_InvalidArgument()
        with self.lock:
            self._advance(g)
            g.limit_mw = int(mw)
        self._record("limit", h, int(mw))

    def nvmlDeviceGetPersistenceMode(self, h) -> int:
        return self._gpu(h).persistence

    def nvmlDeviceSetPersistenceMode(self, h, mode: int) -> None:
        g = self._settable(h)
        g.persistence = int(mode)
        self._record("persistence", h, int(mode))


class FakeClock:
    """A manual monotonic clock (unit: s)."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt
