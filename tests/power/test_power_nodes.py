"""Power limits on cluster nodes: the agent under the fake Slurm sets, profiles and restores its node's GPUs.

Each agent imports a per-node NVML double (tests/fake_pynvml) that logs every set call with
its node's name; the real dev Slurm is not used here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.conftest import PYTHON, SCRIPTS
from tests.executors.test_slurm_executor import check_audit, fake  # noqa: F401  (`fake`: the fake Slurm fixture)
from zeus_run.launcher import run_job
from zeus_run.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
FAKE_PYNVML = Path(__file__).resolve().parents[1] / "fake_pynvml"


def test_agent_sets_profiles_and_restores_its_own_gpus_under_slurm(write_spec, fake, tmp_path, monkeypatch):  # noqa: F811
    nodes = tmp_path / "nodes.json"
    nodes.write_text(
        json.dumps({"fake1": {"gpus": [{"uuid": "GPU-n1", "min_mw": 150_000, "max_mw": 300_000, "limit_mw": 250_000}]}})
    )
    log = tmp_path / "nvml.log"
    monkeypatch.setenv("PYTHONPATH", f"{FAKE_PYNVML}:{REPO}:{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("FAKE_NVML_NODES", str(nodes))
    monkeypatch.setenv("FAKE_NVML_LOG", str(log))
    spec = write_spec(
        f"""
name: node
command: ["{PYTHON}", "{SCRIPTS / "step_train.py"}", "100", "0.004"]
batch_sizes: [32]
default_batch_size: 32
target_metric: 0.9
max_epochs: 4
recurrences: 2
energy: {{source: nvml}}
power_limit: {{step_watts: 50, warmup_iters: 2, measure_iters: 5, min_window_s: 0.01, settle_s: 0, min_counter_updates: 1}}
run_dir: runs
executor: {{kind: slurm, heartbeat_timeout: 30}}
"""
    )
    result = run_job(load_spec(spec))
    records = check_audit(result.run_dir)
    assert len(records) == 2 and all(r.reached for r in records)
    chosen = records[0].power_limit
    assert chosen is not None and records[1].power_limit == chosen
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    sets = [c[3] for c in calls if c[1] == "limit"]
    assert all(c[0] == "fake1" and c[2] == 0 for c in calls)  # the node's own GPU, set by its agent
    # trial 1: probe (original), the sweep 300..150, the choice, restore; trial 2: probe, the stored choice, restore
    c = chosen * 1000
    assert sets == [250_000, 300_000, 250_000, 200_000, 150_000, c, 250_000, 250_000, c, 250_000]
    store = json.loads((result.run_dir / "power_profiles.json").read_text())
    assert list(store["models"]) == ["1 x NVIDIA A40"] and list(store["models"]["1 x NVIDIA A40"]) == ["32"]
