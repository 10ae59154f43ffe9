"""Setting GPU power limits, safely, through the device layer (`zeus_run.device.Gpu`: NVML or zeusd).

`PowerLimitController` owns the job's GPUs' power limits for a run: it checks
before the first trial that limits can be set at all (root or CAP_SYS_ADMIN),
validates every limit against `nvmlDeviceGetPowerManagementLimitConstraints`,
enables persistence mode while limits are changed, and `restore` puts back
each GPU's original limit and persistence mode. `restore` never raises, is
idempotent, and is called after every trial and at the end of the run
(try/finally in `zeus_run.launcher.run`, which also turns SIGINT/SIGTERM into a
normal return). An NVML failure while a run is going disables the controller
with a warning instead of failing the run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from zeus_run.device import Gpu

logger = logging.getLogger(__name__)

HOW_TO_ENABLE = (
    "Setting GPU power limits needs root (or CAP_SYS_ADMIN in a container: `docker run --cap-add SYS_ADMIN`). "
    "Run zeus-run as root, or have an administrator run `sudo nvidia-smi -pm 1` and grant the capability; "
    "or set power_limit.enabled: false to silence this."
)


class PowerLimitRangeError(ValueError):
    """A requested power limit is outside a GPU's allowed range."""


@dataclass
class _GpuLimits:
    gpu: Gpu
    min_w: float
    max_w: float
    original_mw: int
    original_persistence: int | None

    @property
    def index(self) -> str:
        return self.gpu.index


class PowerLimitController:
    """Sets one power limit on all of a job's GPUs (the same limit per GPU).

    Attributes:
        usable: False once limits cannot (or can no longer) be set.
        reason: Why not, when not usable.
        current: Limit set on every GPU now (unit: W), None if untouched.
    """

    def __init__(self, gpus: Sequence[Gpu]) -> None:
        """Args:
        gpus: The job's GPUs (`zeus_run.device.Gpu`: through NVML, or with writes through zeusd).
        """
        self.usable = True
        self.reason = ""
        self.current: float | None = None
        self._changed = False
        self._persistence_changed = False
        self.gpus: list[_GpuLimits] = []
        for g in gpus:
            min_mw, max_mw = g.limit_constraints_mw()
            self.gpus.append(_GpuLimits(g, min_mw / 1000.0, max_mw / 1000.0, g.power_limit_mw(), g.persistence_mode()))

    @property
    def writer(self) -> str:
        """Who sets the limits: ``"NVML"`` or ``"zeusd"``."""
        return self.gpus[0].gpu.writer if self.gpus else "NVML"

    # -- ranges ----------------------------------------------------------------------
    @property
    def min_limit(self) -> float:
        """Lowest limit every GPU accepts (unit: W)."""
        return max(g.min_w for g in self.gpus)

    @property
    def max_limit(self) -> float:
        """Highest limit every GPU accepts (unit: W)."""
        return min(g.max_w for g in self.gpus)

    def candidate_limits(self, step_watts: float) -> list[float]:
        """Limits to profile: from the maximum down to the minimum in ``step_watts`` steps (unit: W).

        The minimum is always included, even when the range is not a multiple of the step.
        """
        if step_watts <= 0:
            raise ValueError(f"step_watts must be > 0, got {step_watts}")
        hi, lo = self.max_limit, self.min_limit
        out, w = [], hi
        while w > lo + 1e-9:
            out.append(w)
            w -= step_watts
        out.append(lo)
        return out

    def validate(self, limit_w: float) -> None:
        """Raises `PowerLimitRangeError` if any GPU does not accept ``limit_w`` (unit: W)."""
        for g in self.gpus:
            if not g.min_w - 1e-9 <= limit_w <= g.max_w + 1e-9:
                raise PowerLimitRangeError(
                    f"power limit {limit_w:g} W is outside GPU {g.index}'s allowed range {g.min_w:g}-{g.max_w:g} W"
                )

    # -- permission ------------------------------------------------------------------
    def check_permission(self) -> bool:
        """Try what setting limits needs, before the first trial; leaves the GPUs as they were.

        Enables persistence mode and re-sets each GPU's current limit. Returns
        False (with `reason` set and the controller unusable) on
        ``NVMLError_NoPermission`` or any other NVML refusal.
        """
        try:
            for g in self.gpus:
                self._enable_persistence(g)
                g.gpu.set_power_limit_mw(g.original_mw)
        except Exception as exc:
            self.usable = False
            if any(g.gpu.is_no_permission(exc) for g in self.gpus):
                self.reason = f"no permission to set GPU power limits ({exc})"
            else:
                self.reason = f"{self.writer} refused to set a power limit ({exc})"
            self.restore()
            return False
        self.restore()
        return True

    # -- setting and restoring ---------------------------------------------------------
    def set(self, limit_w: float) -> bool:
        """Set ``limit_w`` (unit: W) on every GPU of the job.

        Returns:
            True if set. False if the controller is unusable or NVML failed (the
            controller then restores the GPUs and turns itself off, with a warning).

        Raises:
            PowerLimitRangeError: ``limit_w`` is outside a GPU's range (a bug in the caller).
        """
        self.validate(limit_w)
        if not self.usable:
            return False
        try:
            for g in self.gpus:
                self._enable_persistence(g)
                g.gpu.set_power_limit_mw(round(limit_w * 1000))
                self._changed = True
        except Exception as exc:
            logger.warning(
                "setting GPU power limit %g W failed (%s); power-limit optimization is off for the rest of the run",
                limit_w,
                exc,
            )
            self.usable = False
            self.reason = f"setting a limit failed ({exc})"
            self.restore()
            return False
        self.current = float(limit_w)
        logger.debug("GPU power limit set to %g W on GPU(s) %s", limit_w, ",".join(g.index for g in self.gpus))
        return True

    def restore(self) -> None:
        """Put back each GPU's original limit and persistence mode. Never raises; idempotent."""
        if self._changed:
            failed = False
            for g in self.gpus:
                try:
                    g.gpu.set_power_limit_mw(g.original_mw)
                except Exception as exc:
                    failed = True
                    logger.error(
                        "could not restore GPU %s's power limit to %g W (%s); run `sudo nvidia-smi -i %s -pl %g`",
                        g.index,
                        g.original_mw / 1000,
                        exc,
                        g.index,
                        g.original_mw / 1000,
                    )
            self._changed = failed  # try again at the next restore
            self.current = None
        if self._persistence_changed:
            for g in self.gpus:
                if g.original_persistence is None:
                    continue
                try:
                    g.gpu.set_persistence_mode(bool(g.original_persistence))
                except Exception as exc:
                    logger.error("could not restore GPU %s's persistence mode (%s)", g.index, exc)
            self._persistence_changed = False

    def _enable_persistence(self, g: _GpuLimits) -> None:
        if g.original_persistence is None or g.original_persistence:
            return
        g.gpu.set_persistence_mode(True)
        self._persistence_changed = True

    def describe(self) -> str:
        """One line: range and whether limits can be set."""
        rng = f"{self.min_limit:g}-{self.max_limit:g} W"
        return f"power limits {rng}: " + ("can be set" if self.usable else f"cannot be set: {self.reason}")

    def __enter__(self) -> PowerLimitController:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()
