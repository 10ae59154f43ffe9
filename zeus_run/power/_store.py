"""Per-GPU-model, per-batch-size power-limit profiles persisted in the run directory.

``<run_dir>/power_profiles.json``::

    {"version": 2,
     "models": {"1 x NVIDIA A40": {"64": [{"power_limit": 300.0, "avg_power": 251.2, "throughput": 9.8,
                                          "window_s": 5.1, "samples": 51}, ...]}}}

Profiles are keyed by GPU model (`model_key`: how many GPUs of which model a trial runs on),
so a profile measured on one node's A100s serves a trial on another node's A100s, and a slot
of a ``concurrency: N`` run with one A40 never reuses a two-A40 profile. ``power_limit`` and
``avg_power`` are in W (average power is the sum over the trial's GPUs), ``throughput`` in
training iterations per second, ``window_s`` the measurement window's duration in s and
``samples`` the energy-counter updates it saw (absent in files written before they were
recorded). A profile whose sweep a trial did not finish is stored too, its batch size listed
under ``"partial": {MODEL: [BATCH_SIZE, ...]}``; the next trial of that batch size on that
model continues the sweep instead of starting again (`partial`). The chosen limit is not stored but recomputed
with the policy, so a replay with another objective reuses the same measurements.

Version 1 files (``{"version": 1, "gpus": DESCRIPTION, "profiles": {...}}``) are read as the
profiles of the model their description names. Writers on several nodes or slots re-read the
file under a lock file before writing, so one never drops another's profile.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from zeus_run.optimizer.power_limit import PowerLimitMeasurement
from zeus_run.rundir.store import atomic_write

logger = logging.getLogger(__name__)

PROFILES_NAME = "power_profiles.json"


def model_key(names: list[str]) -> str:
    """The profile key of a trial's GPUs: ``"2 x NVIDIA A40"`` (models sorted and joined with ``/``)."""
    return f"{len(names)} x {'/'.join(sorted(set(names)))}"


class ProfileStore:
    """Reads and writes ``power_profiles.json`` (atomically) for one GPU model.

    Attributes:
        key: The GPU model this store reads and writes (`model_key`; "" reads every model,
            for ``history``).
        profiles: Batch size -> profile of this model.
        by_model: Every model's profiles in the file.
    """

    def __init__(self, run_dir: Path, key: str = "") -> None:
        self.path = Path(run_dir) / PROFILES_NAME
        self.key = key
        self.by_model: dict[str, dict[int, list[PowerLimitMeasurement]]] = {}
        self.partial_by_model: dict[str, set[int]] = {}
        self._load()

    @property
    def profiles(self) -> dict[int, list[PowerLimitMeasurement]]:
        """Batch size -> complete profile (this store's model, or every model's when the key is "")."""
        return {
            bs: p
            for model, profiles in self.by_model.items()
            if not self.key or model == self.key
            for bs, p in profiles.items()
            if bs not in self.partial_by_model.get(model, set())
        }

    def _load(self) -> None:
        self.by_model = {}
        self.partial_by_model = {}
        if not self.path.exists():
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("version", 1) == 1:
                models = {_v1_key(str(data.get("gpus", ""))): data.get("profiles", {})}
            else:
                models = data.get("models", {})
            for model, profiles in models.items():
                self.by_model[str(model)] = {int(bs): [_measurement(r) for r in rows] for bs, rows in profiles.items()}
            for model, sizes in data.get("partial", {}).items():
                self.partial_by_model[str(model)] = {int(bs) for bs in sizes}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            logger.warning("ignoring unreadable %s (%s); batch sizes will be profiled again", self.path, exc)
            self.by_model = {}
            self.partial_by_model = {}

    def reload(self) -> None:
        """Read the file again (other slots or nodes may have written it)."""
        self._load()

    def get(self, batch_size: int) -> list[PowerLimitMeasurement] | None:
        """The stored profile of ``batch_size`` on this store's GPU model, if any."""
        return self.profiles.get(batch_size)

    def partial(self, batch_size: int) -> list[PowerLimitMeasurement]:
        """The measurements of ``batch_size``'s unfinished sweep on this store's GPU model ([] if none)."""
        if batch_size not in self.partial_by_model.get(self.key, set()):
            return []
        return list(self.by_model.get(self.key, {}).get(batch_size, []))

    def put(self, batch_size: int, profile: list[PowerLimitMeasurement], partial: bool = False) -> None:
        """Store (replace) a batch size's profile of this model and write the file (merging other writers').

        ``partial``: the sweep is not over (the next trial of the batch size continues it).
        """
        lock = self.path.with_name(PROFILES_NAME + ".lock")
        with os.fdopen(os.open(lock, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644), "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            self._load()
            self.by_model.setdefault(self.key, {})[batch_size] = list(profile)
            unfinished = self.partial_by_model.setdefault(self.key, set())
            if partial:
                unfinished.add(batch_size)
            else:
                unfinished.discard(batch_size)
            data: dict[str, Any] = {
                "version": 2,
                "models": {
                    model: {str(bs): [_row(m) for m in prof] for bs, prof in sorted(profiles.items())}
                    for model, profiles in sorted(self.by_model.items())
                },
            }
            partial_sizes = {model: sorted(sizes) for model, sizes in sorted(self.partial_by_model.items()) if sizes}
            if partial_sizes:
                data["partial"] = partial_sizes
            atomic_write(self.path, json.dumps(data, indent=1) + "\n")


def _v1_key(description: str) -> str:
    """The model key of a version-1 file's GPU description (``NVML: 2 x NVIDIA A40 (GPUs 0,1; ...)``)."""
    m = re.match(r"NVML: (\d+) x ([^(]+?) \(", description)
    return f"{m.group(1)} x {m.group(2)}" if m else description


def _measurement(r: dict[str, Any]) -> PowerLimitMeasurement:
    return PowerLimitMeasurement(
        float(r["power_limit"]),
        float(r["avg_power"]),
        float(r["throughput"]),
        None if r.get("window_s") is None else float(r["window_s"]),
        None if r.get("samples") is None else int(r["samples"]),
    )


def _row(m: PowerLimitMeasurement) -> dict[str, Any]:
    return {
        "power_limit": m.power_limit,
        "avg_power": m.avg_power,
        "throughput": m.throughput,
        "window_s": m.window_s,
        "samples": m.samples,
    }
