"""This process's own time and energy: what the training side measures when no launcher watches it.

Under ``zeus-run run`` and ``exec`` the launcher (or the agent) measures the
script's processes. A script told back through ask/tell, driven by the server,
or run through the Python `Job` measures itself with `SelfMeter`, through the
same sources (`open_energy_source`: NVML, RAPL, the estimate on the spec's
``energy.basis``), so that every trial of a job is measured the same way. The
estimate's ``cpu-time`` basis charges this process's CPU time (and its reaped
children's), as the launcher charges the script's process tree.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from zeus_run.energy._base import EnergySource
from zeus_run.energy._estimate import EstimatedEnergy


def own_cpu_seconds() -> float:
    """CPU time of this process and its reaped children (unit: s)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class SelfMeter:
    """Time and energy of this process since a start, through the job's energy source.

    Args:
        settings: The spec's ``energy`` section as a mapping (``source``, ``watts``, ``basis``,
            ``gpus``, ``include``; unknown keys are ignored), as ``ZEUS_ENERGY`` carries it.
        since: Count from this Unix time (the process's start, so that its start-up counts as
            the launcher counts it); None: from now.
    """

    def __init__(self, settings: Mapping[str, Any], since: float | None = None) -> None:
        from zeus_run.energy import open_energy_source
        from zeus_run.spec import EnergySettings

        known = {"source", "watts", "basis", "gpus", "include"}
        fields = {k: v for k, v in settings.items() if k in known and v is not None}
        for key in ("gpus", "include"):
            if key in fields:
                fields[key] = tuple(str(v) for v in fields[key])
        if "watts" in fields:
            fields["watts"] = float(fields["watts"])
        self.source: EnergySource = open_energy_source(EnergySettings(**fields))
        self.source.track(own_cpu_seconds)
        self._t0 = time.monotonic()
        self._e0 = self.source.read()
        self._pre_t = 0.0
        self._pre_e = 0.0
        if since is not None:
            self._pre_t = max(time.time() - since, 0.0)
            src = self.source
            if isinstance(src, EstimatedEnergy):  # the start-up's share, as the launcher would have charged it
                spent = min(own_cpu_seconds(), self._pre_t) if src.basis == "cpu-time" else self._pre_t
                self._pre_e = src.watts * spent

    def now(self) -> tuple[float, float]:
        """Time (unit: s) and energy (unit: J) since the start."""
        return self._pre_t + time.monotonic() - self._t0, self._pre_e + max(self.source.read() - self._e0, 0.0)

    def info(self) -> dict[str, Any]:
        """How it measures: ``source``, ``method``, ``estimated``, ``max_power`` (what the tell records)."""
        s = self.source
        return {"source": s.name, "method": s.method, "estimated": s.estimated, "max_power": s.max_power}

    def close(self) -> None:
        self.source.track(None)
        self.source.close()
