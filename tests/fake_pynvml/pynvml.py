"""``import pynvml`` for agent subprocesses in tests: a `tests.fake_nvml.FakeNvml` per node.

Put this folder first on ``PYTHONPATH`` and set ``FAKE_NVML_NODES`` to a JSON file
``{"<node>": {"gpus": [FakeGpu fields...], "root": bool}}``; the node is ``SLURMD_NODENAME``
(the fake Slurm sets it), else ``local``. Power follows the limit up to ``draw_w`` (default
220 W). Every set call is appended to ``FAKE_NVML_LOG`` with the node's name:
``["<node>", "limit", index, mW]``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fake_nvml import FakeGpu, FakeNvml

_NODE = os.environ.get("SLURMD_NODENAME", "local")
_CONF = json.loads(Path(os.environ["FAKE_NVML_NODES"]).read_text())[_NODE]


def _gpu(fields: dict) -> FakeGpu:
    draw = float(fields.pop("draw_w", 220.0))
    return FakeGpu(**fields, power_fn=lambda t, limit: min(limit, draw))


_FAKE = FakeNvml([_gpu(dict(g)) for g in _CONF["gpus"]], root=bool(_CONF.get("root", True)))
_LOG = os.environ.get("FAKE_NVML_LOG")


def _record(*call) -> None:
    _FAKE.calls.append(call)
    if _LOG:
        with open(_LOG, "a") as f:
            f.write(json.dumps([_NODE, *call]) + "\n")


_FAKE._record = _record  # type: ignore[method-assign]


def __getattr__(name: str):
    return getattr(_FAKE, name)
