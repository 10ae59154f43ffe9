"""CPU package and DRAM energy through RAPL's powercap counters, and sources that add them up.

Linux exposes RAPL (Intel, and AMD Zen through the same ``intel-rapl`` powercap driver) as
zones under ``/sys/class/powercap``:

    intel-rapl:0/            name "package-0", energy_uj, max_energy_range_uj
    intel-rapl:0/intel-rapl:0:0/   name "core" (inside the package: never added again)
    intel-rapl:0/intel-rapl:0:2/   name "dram"

``energy_uj`` counts microjoules and wraps to 0 after ``max_energy_range_uj``; a reading
below the previous one means one wrap (readings come at least every few seconds while a
trial runs; a package drawing 300 W wraps a 262 kJ range every ~15 minutes). Since Linux
5.10 (CVE-2020-8694, the "Platypus" power side channel) ``energy_uj`` is readable by root
only: `RaplEnergy` then raises `zeus_run.errors.EnergyError` saying so and how to grant read
access.

RAPL measures the whole package and DIMMs: every process on the machine, not the job alone.

The root defaults to ``/sys/class/powercap``; ``ZEUS_RUN_POWERCAP_ROOT`` points it elsewhere
(a container that mounts sysfs elsewhere, or a test's fake tree).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zeus_run.energy._base import EnergySource
from zeus_run.errors import EnergyError

logger = logging.getLogger(__name__)

#: Where the kernel exposes powercap zones.
POWERCAP_ROOT = Path("/sys/class/powercap")
#: Environment variable that overrides `POWERCAP_ROOT`.
ROOT_ENV = "ZEUS_RUN_POWERCAP_ROOT"
#: RAPL domains zeus-run can count: ``cpu`` (package zones) and ``dram``.
DOMAINS = ("cpu", "dram")
#: How to grant read access, for the messages.
HOW_TO_READ = (
    "Since Linux 5.10 (CVE-2020-8694) only root can read them: run as root, or let this user read them "
    "(e.g. a udev rule or `chmod a+r /sys/class/powercap/intel-rapl:*/energy_uj "
    "/sys/class/powercap/intel-rapl:*/*/energy_uj` at boot)"
)


def powercap_root() -> Path:
    """The powercap root (`ROOT_ENV` or `POWERCAP_ROOT`)."""
    return Path(os.environ.get(ROOT_ENV) or POWERCAP_ROOT)


@dataclass
class RaplZone:
    """One counter: its folder, domain (``cpu`` or ``dram``), range and last reading (unit: uJ)."""

    path: Path
    name: str
    domain: str
    range_uj: int
    max_power_w: float | None
    last_uj: int = 0

    def read_uj(self) -> int:
        return int((self.path / "energy_uj").read_text().strip())


def find_zones(root: Path, domains: tuple[str, ...] = DOMAINS) -> list[RaplZone]:
    """The package (``cpu``) and ``dram`` zones under ``root`` (sub-zones other than dram are skipped).

    Raises:
        EnergyError: A zone exists but its counter cannot be read (permission), or is malformed.
    """
    zones: list[RaplZone] = []
    if not root.is_dir():
        return zones
    candidates = sorted(p for p in root.glob("*-rapl:*") if p.is_dir() and p.name.count(":") == 1)
    for top in candidates:
        for path in [top, *sorted(p for p in top.glob("*-rapl:*:*") if p.is_dir())]:
            try:
                name = (path / "name").read_text().strip()
            except OSError:
                continue
            domain = "cpu" if name.startswith("package") else "dram" if name == "dram" else None
            if domain is None or domain not in domains:
                continue
            zones.append(_open_zone(path, name, domain))
    return zones


def _open_zone(path: Path, name: str, domain: str) -> RaplZone:
    try:
        range_uj = int((path / "max_energy_range_uj").read_text().strip())
        zone = RaplZone(path, name, domain, range_uj, _max_power(path))
        zone.last_uj = zone.read_uj()
    except PermissionError:
        raise EnergyError(f"RAPL counter {str(path / 'energy_uj')!r} is not readable. {HOW_TO_READ}.") from None
    except (OSError, ValueError) as exc:
        raise EnergyError(f"RAPL zone {str(path)!r} cannot be read ({exc}).") from None
    if range_uj <= 0:
        raise EnergyError(f"RAPL zone {str(path)!r} reports max_energy_range_uj {range_uj}; it cannot be used.")
    return zone


def _max_power(path: Path) -> float | None:
    """The zone's long-term power limit or max power (unit: W), if it reports one."""
    for name in ("constraint_0_max_power_uw", "constraint_0_power_limit_uw"):
        try:
            value = int((path / name).read_text().strip())
        except (OSError, ValueError):
            continue
        if value > 0:
            return value / 1e6
    return None


class RaplEnergy(EnergySource):
    """Cumulative energy of the machine's RAPL package and/or DRAM zones."""

    name = "rapl"

    def __init__(self, domains: tuple[str, ...] = DOMAINS, root: Path | None = None, watts: float = 100.0) -> None:
        """Args:
            domains: Which zones to count: ``cpu`` (packages) and/or ``dram``.
            root: The powercap root (None: `powercap_root`).
            watts: Max power for the cost when no zone reports a power limit (unit: W).

        Raises:
            EnergyError: No such zone, or its counter is unreadable (the message says how to fix it).
        """
        self.root = powercap_root() if root is None else root
        self.zones = find_zones(self.root, domains)
        if not self.zones:
            raise EnergyError(
                f"No RAPL {'/'.join(domains)} counters under {str(self.root)!r} (no intel-rapl powercap driver, "
                "or a virtual machine that hides it)."
            )
        self._watts = watts
        self._acc_uj = 0

    @property
    def method(self) -> str:
        return "rapl-counter"

    @property
    def max_power(self) -> float:
        limits = [z.max_power_w for z in self.zones if z.domain == "cpu"]
        known = [w for w in limits if w is not None]
        return sum(known) if known and len(known) == len(limits) else self._watts

    def read(self) -> float:
        for z in self.zones:
            now = z.read_uj()
            delta = now - z.last_uj
            if delta < 0:  # one wrap past max_energy_range_uj
                delta += z.range_uj
            self._acc_uj += delta
            z.last_uj = now
        return self._acc_uj / 1e6

    def describe(self) -> str:
        return "RAPL: " + ", ".join(f"{z.name} ({z.path.name})" for z in self.zones) + " (whole machine)"

    def devices(self) -> list[dict[str, str]]:
        return [{"name": f"RAPL {z.name}", "uuid": z.path.name} for z in self.zones]


class SumEnergy(EnergySource):
    """Several sources read as one (GPU energy plus RAPL's CPU and DRAM energy)."""

    def __init__(self, parts: list[EnergySource]) -> None:
        self.parts = parts
        self.name = "+".join(p.name for p in parts)
        self.estimated = any(p.estimated for p in parts)

    @property
    def method(self) -> str:
        return "+".join(p.method for p in self.parts)

    @property
    def max_power(self) -> float:
        return sum(p.max_power for p in self.parts)

    def read(self) -> float:
        total = sum(p.read() for p in self.parts)
        self.invalid_windows = sum(p.invalid_windows for p in self.parts)
        return total

    def describe(self) -> str:
        return " + ".join(p.describe() for p in self.parts)

    def power(self) -> float | None:
        powers = [p.power() for p in self.parts]
        return None if any(w is None for w in powers) else sum(w for w in powers if w is not None)

    def devices(self) -> list[dict[str, str]]:
        return [d for p in self.parts for d in p.devices()]

    def track(self, cpu_seconds: Callable[[], float] | None) -> None:
        for p in self.parts:
            p.track(cpu_seconds)

    def close(self) -> None:
        for p in self.parts:
            p.close()


def rapl_status(root: Path | None = None) -> str:
    """One line on this machine's RAPL counters, for ``zeus-run check``."""
    root = powercap_root() if root is None else root
    try:
        zones = find_zones(root)
    except EnergyError as exc:
        return f"RAPL: present but unusable: {exc} Without them CPU-only jobs get the labelled estimate."
    if not zones:
        return "RAPL: none here (CPU-only jobs get the labelled estimate)"
    names = ", ".join(z.name for z in zones)
    return (
        f"RAPL: {names} readable; energy.source: rapl (or auto without a GPU) measures them, "
        "energy.include: [gpu, cpu, dram] adds them to GPU energy"
    )
