"""``import pynvml`` for agent subprocesses in tests: a `tests.fake_nvml.FakeNvml` per node.

Put this folder first on ``PYTHONPATH`` and set ``FAKE_NVML_NODES`` to a JSON file
``{"<node>": {"gpus": [FakeGpu fields...], "root": bool}}``; the node is ``SLURMD_NODENAME``
(the fake Slurm sets it), else ``local``. Power follows the limit up to ``draw_w`` (default
220 W), constant, on a counter of this process's own; a GPU with any of `tests.fake_nvml.TRUTH_FIELDS`
(``marks``, ``phases``, ``idle_w``, ``t0``, ``sample_share``; ``update_ms`` goes with them) is a
`tests.fake_nvml.GpuTruth` one instead: one counter shared by every process, power that changes with the
marks, an update period and power sampled part of the time (the settings: tests/fake_nvml.py's docstring). Every set call is appended to ``FAKE_NVML_LOG`` with the node's name:
``["<node>", "limit", index, mW]``.

One device, one counter: a GPU's energy counter reads what it drew since ``counter_origin`` (a GPU field, in
``CLOCK_MONOTONIC`` seconds, the same in every process and unmoved when the wall clock jumps; default 0: since
boot), so every process on the node reads the same counter (a reading ``zeus-run ask`` takes in its process
compares with one the script takes in its own), as long as its power stays ``draw_w`` (no limit below it).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fake_nvml import TRUTH_FIELDS, FakeGpu, FakeNvml, GpuTruth, NVMLError, boot_clock

_NODE = os.environ.get("SLURMD_NODENAME", "local")
_CONF = json.loads(Path(os.environ["FAKE_NVML_NODES"]).read_text())[_NODE]


def _gpu(fields: dict) -> FakeGpu:
    draw = float(fields.pop("draw_w", 220.0))
    if any(k in fields for k in TRUTH_FIELDS):
        truth = GpuTruth.from_fields(fields, draw)  # takes its settings out of fields
        return FakeGpu(**fields, truth=truth)
    origin = float(fields.pop("counter_origin", 0.0))
    gpu = FakeGpu(**fields, power_fn=lambda t, limit: min(limit, draw))
    if "energy_mj" not in fields:  # the device's counter since the origin: the same in every process
        gpu._t = time.monotonic()  # the clock `FakeNvml` advances the counter on
        gpu.energy_mj = min(gpu.limit_mw / 1000.0, draw) * max(gpu._t - origin, 0.0) * 1000.0
    return gpu


_GPUS = [_gpu(dict(g)) for g in _CONF["gpus"]]
#: One clock for every process where a GPU has a shared truth (the boot clock its marks are written on).
_CLOCK = boot_clock if any(g.truth is not None for g in _GPUS) else time.monotonic
_FAKE = FakeNvml(_GPUS, root=bool(_CONF.get("root", True)), clock=_CLOCK)
_LOG = os.environ.get("FAKE_NVML_LOG")


def _record(*call) -> None:
    _FAKE.calls.append(call)
    if _LOG:
        with open(_LOG, "a") as f:
            f.write(json.dumps([_NODE, *call]) + "\n")


_FAKE._record = _record  # type: ignore[method-assign]


#: A file whose existence makes the energy counter fail (``FAKE_NVML_FAIL_COUNTER``): a device error that starts
#: while a process runs (issue 54, 3: the counter fails after the tell).
_FAIL_COUNTER = os.environ.get("FAKE_NVML_FAIL_COUNTER")


def nvmlDeviceGetTotalEnergyConsumption(h) -> int:
    if _FAIL_COUNTER and os.path.exists(_FAIL_COUNTER):
        raise NVMLError(999)
    return _FAKE.nvmlDeviceGetTotalEnergyConsumption(h)


def __getattr__(name: str):
    return getattr(_FAKE, name)
