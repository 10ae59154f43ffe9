"""The energy-source interface: a cumulative energy counter and the max power for the cost."""

from __future__ import annotations

from abc import ABC, abstractmethod


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

    def close(self) -> None:
        """Release resources (NVML handles, sampling threads); nothing by default."""
        return None

    def __enter__(self) -> EnergySource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
