"""A test double shaped like ``pynvml`` (nvidia-ml-py), injected where zeus-run imports NVML.

`FakeNvml` instances expose the module-level functions and constants that
zeus-run uses. GPUs are `FakeGpu` objects whose energy counter and power
draw are scriptable: set ``energy_mj`` / ``power_mw`` directly, or give
``power_fn(t, limit_w) -> W``, in which case the counter integrates it over a
(possibly fake) clock. ``update_ms`` makes the total-energy counter behave like
real NVML's: it advances only every ``update_ms`` milliseconds of the clock, each
reading reporting the energy at the last update. Every set call can be appended to ``log_path`` (one
JSON line each), so a test can see what a subprocess did to the GPUs.

A GPU given a `GpuTruth` (``truth``) is as hard as a real one: one device counter that every process on the
GPU reads alike, because it is a function of the boot clock and of a marks file that the processes share.
Its settings (`GpuTruth`, named the same in ``FAKE_NVML_NODES``, tests/fake_pynvml):

    marks         a JSON-lines file of power changes, ``{"t": seconds since boot, "w": watts}`` or
                  ``{"t": ..., "phase": name}``: the GPU's true power is the latest mark's at or before a time
                  (the script being measured writes them: start-up, training, its tail after the last epoch,
                  idle at exit). Read anew on every call, so a mark one process writes moves every process's
                  counter; marks need not be in time order.
    phases        ``{name: watts}`` for marks that name a phase (``startup``, ``train``, ``tail``, ``idle``).
    idle_w        the power before the first mark (default: ``phases["idle"]``, else ``draw_w``).
    t0            the counter's origin (seconds since boot; the counter is 0 there, as after a driver load).
    update_ms     the counter's update period (real GPUs: 20-100 ms): a reading reports the counter at the
                  last update, and the power reading is the mean of the last complete update period.
    sample_share  the share of each update period in which power is sampled (A100/H100: 0.25): the counter
                  advances by the mean power of the sampled part times the period, so a change of power in
                  the unsampled part is seen late or not at all (at most ``update_ms`` x the change per mark).

The true energy over a span (`GpuTruth.true_energy`) is the exact integral of the marks; the counter differs
from it by at most ``update_ms`` x (the largest power + the sum of the power changes in the span).
"""

from __future__ import annotations

import json
import math
import os
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
class GpuTruth:
    """The shared truth of one GPU (see the module's docstring): its power over time from a marks file, and
    the energy counter NVML would report from it. Times in seconds since boot, power in W."""

    marks: str | None = None
    phases: dict[str, float] = field(default_factory=dict)
    idle_w: float = 100.0
    t0: float = 0.0
    update_ms: float | None = None
    sample_share: float = 1.0
    _pos: int = field(default=0, repr=False)
    _buf: bytes = field(default=b"", repr=False)
    _points: list[tuple[float, float]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.sample_share <= 1.0:
            raise ValueError(f"sample_share {self.sample_share}: a share of the update period, in (0, 1]")
        if self.update_ms is not None and self.update_ms <= 0:
            raise ValueError(f"update_ms {self.update_ms}: a period in ms above 0")

    def _read(self) -> list[tuple[float, float]]:
        """The marks as (time, watts), in time order; new lines of the file read on each call."""
        if self.marks and os.path.exists(self.marks):
            with open(self.marks, "rb") as f:
                f.seek(self._pos)
                chunk = f.read()
            self._pos += len(chunk)
            *lines, self._buf = (self._buf + chunk).split(b"\n")
            fresh = []
            for raw in lines:
                try:
                    m = json.loads(raw)
                    w = float(m["w"]) if "w" in m else float(self.phases[m["phase"]])
                    fresh.append((float(m["t"]), w))
                except (ValueError, KeyError, TypeError):
                    continue
            if fresh:
                self._points = sorted(self._points + fresh, key=lambda p: p[0])
        return self._points

    def segments(self, a: float, b: float, limit_w: float = math.inf) -> list[tuple[float, float, float]]:
        """(start, end, watts) of constant power covering [a, b)."""
        out = []
        points = self._read()
        w = self.idle_w
        t = a
        for tm, pw in points:
            if tm <= a:
                w = pw
                continue
            if tm >= b:
                break
            out.append((t, tm, min(w, limit_w)))
            t, w = tm, pw
        if b > t:
            out.append((t, b, min(w, limit_w)))
        return out

    def power_at(self, t: float, limit_w: float = math.inf) -> float:
        """The true power at ``t`` (unit: W)."""
        return self.segments(t, t + 1e-9, limit_w)[0][2]

    def true_energy(self, a: float, b: float, limit_w: float = math.inf) -> float:
        """The exact energy over [a, b) (unit: J)."""
        return sum((e - s) * w for s, e, w in self.segments(a, b, limit_w))

    def _sampled(self, x: float) -> float:
        """Seconds of [t0, x) in which power is sampled."""
        if self.update_ms is None:
            return x - self.t0
        p = self.update_ms / 1000.0
        k = math.floor((x - self.t0) / p + 1e-9)  # 1e-9: 0.3 / 0.1 is 2.999...
        return k * self.sample_share * p + min(x - self.t0 - k * p, self.sample_share * p)

    def last_update(self, t: float) -> float:
        if self.update_ms is None:
            return t
        p = self.update_ms / 1000.0
        return self.t0 + math.floor((t - self.t0) / p + 1e-9) * p

    def _integral(self, u: float, limit_w: float) -> float:
        """The counter at update ``u`` (unit: J): the sampled power integrated from ``t0`` to ``u``."""
        if u <= self.t0:
            return 0.0
        share = 1.0 if self.update_ms is None else self.sample_share
        return sum(w * (self._sampled(e) - self._sampled(s)) for s, e, w in self.segments(self.t0, u, limit_w)) / share

    def counter_j(self, t: float, limit_w: float = math.inf) -> float:
        """The counter NVML reports at ``t`` (unit: J): its value at the last update at or before ``t``."""
        return self._integral(self.last_update(t), limit_w)

    def power_w(self, t: float, limit_w: float = math.inf) -> float:
        """The power NVML reports at ``t`` (unit: W): the mean over the last complete update period, as the counter
        saw it (the power at ``t`` without an update period)."""
        if self.update_ms is None:
            return self.power_at(t, limit_w)
        u = self.last_update(t)
        p = self.update_ms / 1000.0
        if u - p < self.t0:
            return self.power_at(t, limit_w)
        return (self._integral(u, limit_w) - self._integral(u - p, limit_w)) / p

    @classmethod
    def from_fields(cls, fields: dict, draw_w: float) -> GpuTruth:
        """The truth from a GPU's ``FAKE_NVML_NODES`` fields (popping the ones it takes)."""
        phases = {str(k): float(v) for k, v in (fields.pop("phases", None) or {}).items()}
        idle = fields.pop("idle_w", None)
        update = fields.pop("update_ms", None)
        return cls(
            marks=fields.pop("marks", None),
            phases=phases,
            idle_w=float(idle if idle is not None else phases.get("idle", draw_w)),
            t0=float(fields.pop("t0", 0.0)),
            update_ms=None if update is None else float(update),
            sample_share=float(fields.pop("sample_share", 1.0)),
        )


#: The settings that make a ``FAKE_NVML_NODES`` GPU a `GpuTruth` one (a GPU with none draws ``draw_w``).
TRUTH_FIELDS = ("marks", "phases", "idle_w", "t0", "sample_share")


def boot_clock() -> float:
    """Seconds since boot (CLOCK_BOOTTIME): the clock of `GpuTruth`, shared by every process."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


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
    truth: GpuTruth | None = None  # the shared truth (the counter and power are read from it)
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
            if g.truth is not None:
                return round(g.truth.counter_j(self.clock(), g.limit_mw / 1000.0) * 1000.0)
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
            if g.truth is not None:
                return round(g.truth.power_w(self.clock(), g.limit_mw / 1000.0) * 1000.0)
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
