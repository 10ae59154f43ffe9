"""A fake ``/sys/class/powercap`` tree (RAPL zones) for the RAPL tests.

`FakePowercap(root)` writes zones the way the intel-rapl driver lays them out; ``set`` moves a
zone's ``energy_uj`` counter (wrapping past ``max_energy_range_uj`` as the hardware does).
"""

from __future__ import annotations

from pathlib import Path


class FakePowercap:
    """Zones ``intel-rapl:N`` (package-N, with core and dram sub-zones) under ``root``."""

    def __init__(self, root: Path, packages: int = 1, dram: bool = True, range_uj: int = 262_143_328_850) -> None:
        self.root = root
        self.range_uj = range_uj
        self.zones: dict[str, Path] = {}
        for n in range(packages):
            top = root / f"intel-rapl:{n}"
            self._zone(top, f"package-{n}", max_power_uw=125_000_000)
            self._zone(top / f"intel-rapl:{n}:0", "core")
            if dram:
                self._zone(top / f"intel-rapl:{n}:1", "dram")
        (root / "intel-rapl").mkdir(parents=True, exist_ok=True)  # the control-type folder the kernel also has

    def _zone(self, path: Path, name: str, max_power_uw: int | None = None) -> None:
        path.mkdir(parents=True, exist_ok=True)
        (path / "name").write_text(name + "\n")
        (path / "max_energy_range_uj").write_text(f"{self.range_uj}\n")
        (path / "energy_uj").write_text("0\n")
        if max_power_uw is not None:
            (path / "constraint_0_max_power_uw").write_text(f"{max_power_uw}\n")
        self.zones[path.name] = path

    def set(self, zone: str, uj: int) -> None:
        """Set zone ``zone``'s (e.g. ``intel-rapl:0``) counter to ``uj`` modulo the range."""
        (self.zones[zone] / "energy_uj").write_text(f"{uj % self.range_uj}\n")

    def add(self, zone: str, uj: int) -> None:
        """Advance zone ``zone``'s counter by ``uj`` (wrapping)."""
        now = int((self.zones[zone] / "energy_uj").read_text())
        self.set(zone, now + uj)
