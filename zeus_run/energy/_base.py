"""The energy-source interface: a cumulative energy counter and the max power for the cost."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable


class EnergySource(ABC):
    """Measures (or estimates) the energy a job's devices consume.

    `read` returns cumulative energy since the source was opened; callers take
    differences between readings. Readings never decrease.

    Attributes:
        name: ``nvml`` or ``estimate``; stored with every trial record.
        estimated: True when readings are an estimate rather than a measurement.
        invalid_windows: Readings so far that were discarded because the device's
            counter went backwards (never for an estimate).
    """

    name: str = ""
    estimated: bool = False
    invalid_windows: int = 0

    @property
    def method(self) -> str:
        """How energy is obtained, e.g. ``counter``, ``power-sampling`` or ``watts-x-time``."""
        return self.name

    @property
    @abstractmethod
    def max_power(self) -> float:
        """Maximum power of the job's devices (unit: W); converts time into cost."""

    @abstractmethod
    def read(self) -> float:
        """Cumulative energy since the source was opened (unit: J)."""

    @abstractmethod
    def describe(self) -> str:
        """One line for people, e.g. ``NVML: 2 x NVIDIA A40 (total energy counter)``."""

    def power(self) -> float | None:
        """The devices' power draw now (unit: W), where the source can read one; None where it cannot.

        A training process that measures itself (`zeus_run.energy.SelfMeter`) charges the start-up it spent
        before it could read the source at this power.
        """
        return None

    def counter(self) -> float | None:
        """The devices' own cumulative energy counter now (unit: J), the same in every process on the host (NVML's
        total energy since the driver loaded), so that a reading in one process compares with one in another;
        None where the source has none (an estimate, power sampling)."""
        return None

    def track(self, cpu_seconds: Callable[[], float] | None) -> None:
        """Tell the source how to read the CPU time of the trial now running (None: none runs).

        Only an estimate charged by CPU time uses it; a measurement ignores it.
        """
        return None

    def devices(self) -> list[dict[str, str]]:
        """The measured devices, for provenance: ``[{"name": ..., "uuid": ...}]`` (empty for an estimate)."""
        return []

    def close(self) -> None:
        """Release resources (NVML handles, sampling threads); nothing by default."""
        return None

    def __enter__(self) -> EnergySource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
