"""The benchmark script, on a tiny trace directory and on one real job."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sim_helpers import write_tiny_traces

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_optimizer.py"


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_bench_json_on_tiny_traces(tmp_path):
    d = write_tiny_traces(tmp_path / "traces")
    out = bench("--traces", str(d), "--gpus", "tiny", "--seeds", "1-2", "--json", "--policies", "zeus")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["workload"], r["gpu"], r["seed"]) for r in rows] == [("squad", "tiny", 1), ("squad", "tiny", 2)]
    for r in rows:
        assert r["horizon"] == 8
        assert r["oracle_cost"] == pytest.approx(8 * 5 * 725)  # bs 8 at 100 W, 5 epochs of 725 J
        assert r["default_cost"] == pytest.approx(8 * 5 * 1050)  # bs 16 at 200 W, 5 epochs of 1050 J
        assert r["regret"] == pytest.approx(r["cost"] / r["oracle_cost"] - 1)
    assert "skipping imagenet" in out.stderr  # the other paper jobs are not in this trace


def test_bench_table_on_real_traces(traces_dir):
    out = bench("--traces", str(traces_dir), "--gpus", "v100", "--seeds", "1", "--jobs", "squad")
    assert out.returncode == 0, out.stderr
    assert "policy zeus\n" in out.stdout and "policy zeus-plus" in out.stdout
    assert "squad" in out.stdout and "median regret over 1 rows" in out.stdout
