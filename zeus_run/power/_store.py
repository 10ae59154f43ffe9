"""Per-batch-size power-limit profiles persisted in the run directory.

``<run_dir>/power_profiles.json``::

    {"version": 1,
     "gpus": "NVML: 1 x NVIDIA A40 (...)",
     "profiles": {"64": [{"power_limit": 300.0, "avg_power": 251.2, "throughput": 9.8}, ...]}}

``power_limit`` and ``avg_power`` are in W (average power is the sum over the
job's GPUs), ``throughput`` in training iterations per second, ``window_s`` the
measurement window's duration in s and ``samples`` the energy-counter updates it
saw (both absent in files written before they were recorded). Only complete
profiles are stored; the chosen limit is not stored but recomputed with the
policy, so a replay with another eta reuses the same measurements.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from zeus_run.optimizer.power_limit import PowerLimitMeasurement
from zeus_run.rundir import atomic_write

logger = logging.getLogger(__name__)

PROFILES_NAME = "power_profiles.json"


class ProfileStore:
    """Reads and writes ``power_profiles.json`` (atomically)."""

    def __init__(self, run_dir: Path, gpus: str = "") -> None:
        self.path = Path(run_dir) / PROFILES_NAME
        self.gpus = gpus
        self.profiles: dict[int, list[PowerLimitMeasurement]] = {}
        self.stored_gpus = ""
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self.stored_gpus = str(data.get("gpus", ""))
            for bs, rows in data.get("profiles", {}).items():
                self.profiles[int(bs)] = [
                    PowerLimitMeasurement(
                        float(r["power_limit"]),
                        float(r["avg_power"]),
                        float(r["throughput"]),
                        None if r.get("window_s") is None else float(r["window_s"]),
                        None if r.get("samples") is None else int(r["samples"]),
                    )
                    for r in rows
                ]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            logger.warning("ignoring unreadable %s (%s); batch sizes will be profiled again", self.path, exc)
            self.profiles = {}

    def get(self, batch_size: int) -> list[PowerLimitMeasurement] | None:
        """The stored profile of ``batch_size``, if any."""
        return self.profiles.get(batch_size)

    def put(self, batch_size: int, profile: list[PowerLimitMeasurement]) -> None:
        """Store (replace) a batch size's profile and write the file."""
        self.profiles[batch_size] = list(profile)
        data = {
            "version": 1,
            "gpus": self.gpus,
            "profiles": {
                str(bs): [
                    {
                        "power_limit": m.power_limit,
                        "avg_power": m.avg_power,
                        "throughput": m.throughput,
                        "window_s": m.window_s,
                        "samples": m.samples,
                    }
                    for m in prof
                ]
                for bs, prof in sorted(self.profiles.items())
            },
        }
        atomic_write(self.path, json.dumps(data, indent=1) + "\n")
