"""The benchmark script, on a tiny trace directory and on one real job."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.sim_helpers import write_tiny_traces
from zeus_run.sim import JOBS, Noise, guided_walk, informed_start, job_table, load_traces, oracle_baseline, simulate
from zeus_run.spec import OptimizerSettings

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
    out = bench(
        "--traces",
        str(traces_dir),
        "--gpus",
        "v100",
        "--seeds",
        "1-3",
        "--jobs",
        "squad",
        "--policies",
        "zeus,zeus-plus",
    )
    assert out.returncode == 0, out.stderr
    assert "policy zeus\n" in out.stdout and "policy zeus-plus" in out.stdout
    assert "eta 0.5, beta 2.0, seeds 1-3 (3)" in out.stdout
    headers = [line.split() for line in out.stdout.splitlines() if line.startswith("job")]
    columns = ["job", "gpu", "horizon", "cost/Default", "median", "p90", "mean", ">1.1xD", "Default", "floor", "walk"]
    columns.append("reference")
    tries = ["tries", "max", ">1", "try"]
    assert headers == [[*columns, *tries], [*columns, "zeus", *tries]]  # zeus-plus's table also shows zeus's
    assert "median regret over 1 rows" in out.stdout and "worst row:" in out.stdout
    assert "rows worse than the reference:" in out.stdout
    assert "rows worse than zeus (" in out.stdout  # zeus-plus is compared with zeus on the same seeds
    assert "(3 simulations)" in out.stdout
    traces = load_traces(traces_dir / "summary_train.csv", traces_dir / "summary_power_v100.csv")
    table = job_table(traces, JOBS["squad"])
    floor = informed_start(table) / (table.horizon * oracle_baseline(table, 0.5).cost) - 1.0
    assert f"each first run profiling the limits): median over rows {floor * 100:.2f}%\n" in out.stdout
    walk = guided_walk(table) / (table.horizon * oracle_baseline(table, 0.5).cost) - 1.0
    assert f"to the Oracle's and the one beyond it): median over rows {walk * 100:.2f}%\n" in out.stdout


def test_bench_rows_match_simulate_in_one_or_many_processes(traces_dir):
    """Medians and p90 are those of the per-seed regrets, whatever the number of worker processes."""
    args = ("--traces", str(traces_dir), "--gpus", "v100", "--jobs", "squad", "--seeds", "1-6", "--policies", "zeus")
    one, many = bench(*args, "--eta", "0.2", "--workers", "1"), bench(*args, "--eta", "0.2", "--workers", "2")
    assert one.returncode == 0 and many.returncode == 0, one.stderr + many.stderr
    table = [line for line in one.stdout.splitlines() if line.startswith("squad")]
    assert len(table) == 1 and table == [line for line in many.stdout.splitlines() if line.startswith("squad")]
    regrets = [json.loads(line)["regret"] for line in bench(*args, "--eta", "0.2", "--json").stdout.splitlines()]
    assert len(regrets) == 6
    cells = table[0].split()
    assert float(cells[4].rstrip("%")) == pytest.approx(statistics.median(regrets) * 100, abs=0.006)
    assert float(cells[5].rstrip("%")) == pytest.approx(float(np.percentile(regrets, 90)) * 100, abs=0.006)
    assert "rows worse than the reference" not in one.stdout  # the reference was measured at eta 0.5 only


@pytest.mark.parametrize(("eta", "beta", "flag"), [(0.2, None, "null"), (0.8, 1.5, "1.5")])
def test_bench_passes_eta_and_beta_to_the_simulator(traces_dir, eta, beta, flag):
    args = ("--traces", str(traces_dir), "--gpus", "v100", "--jobs", "squad", "--seeds", "3-4", "--policies", "zeus")
    out = bench(*args, "--eta", str(eta), "--beta", flag, "--json")
    assert out.returncode == 0, out.stderr
    table = job_table(
        load_traces(traces_dir / "summary_train.csv", traces_dir / "summary_power_v100.csv"), JOBS["squad"]
    )
    zeus = OptimizerSettings.for_policy("zeus")
    expected = [simulate(table, eta=eta, beta=beta, seed=s, settings=zeus, baselines=False).to_json() for s in (3, 4)]
    got = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r.pop("revision") for r in got] == [zeus.revision] * 2
    assert got == expected


def test_bench_defaults_to_zeus_and_the_default_policy(traces_dir):
    out = bench("--traces", str(traces_dir), "--gpus", "a40", "--jobs", "sentiment140", "--seeds", "1-2")
    assert out.returncode == 0, out.stderr
    assert [line for line in out.stdout.splitlines() if line.startswith("policy ")] == [
        "policy zeus",
        "policy zeus-voi",
    ]
    assert "eta 0.5, beta 2.0, seeds 1-2 (2)" in out.stdout


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--beta", "-1", "--beta"),
        ("--eta", "1.5", "--eta"),
        ("--policies", "nope", "unknown nope"),
        ("--seeds", "x", "--seeds"),
        ("--noise", "0.1", "P:LO-HI"),
        ("--noise", "0.1:3-1.5", "1 <= LO <= HI"),
        ("--horizon", "0", "--horizon"),
    ],
)
def test_bench_rejects_bad_options(tmp_path, flag, value, message):
    out = bench("--traces", str(tmp_path), flag, value)
    assert out.returncode == 2 and message in out.stderr


def test_bench_noise_and_horizon(traces_dir):
    args = ("--traces", str(traces_dir), "--gpus", "v100", "--seeds", "1-3", "--jobs", "squad", "--workers", "1")
    out = bench(*args, "--noise", "0.2:1.5-3", "--horizon", "16")
    assert out.returncode == 0, out.stderr
    assert "max_early_stops 3, noise 0.2:1.5-3, horizon 16, seeds 1-3 (3)" in out.stdout
    (row,) = [line.split() for line in out.stdout.splitlines() if line.startswith("squad")][1:]  # zeus-voi's row
    assert row[2] == "16"
    assert float(row[-3]) >= 1.0 and 1 <= int(row[-2]) <= 2  # the default policy: at most one extra try
    assert "recurrences with more than one try:" in out.stdout
    # Regret is against the Oracle under the same noise (`SimResult.load`).
    table = job_table(
        load_traces(traces_dir / "summary_train.csv", traces_dir / "summary_power_v100.csv"), JOBS["squad"]
    )
    r = simulate(table, seed=1, horizon=16, noise=Noise(0.2, 1.5, 3.0), baselines=False)
    assert r.load == pytest.approx(sum(r.slowdowns)) and r.load > 16
    assert r.oracle_cost == pytest.approx(r.load * r.oracle.cost)


def _bench_module():
    import importlib.util

    name = "bench_optimizer"
    if name not in sys.modules:  # its dataclasses look their module up by name
        spec = importlib.util.spec_from_file_location(name, SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_worse_than_zeus_is_a_paired_bootstrap_interval_above_zero():
    paired_interval = _bench_module().paired_interval
    rng = np.random.default_rng(3)
    zeus = tuple(rng.normal(0.05, 0.02, 100))
    assert paired_interval(tuple(z + 0.01 for z in zeus), zeus) == pytest.approx((0.01, 0.01))  # always 1 point worse
    lo, hi = paired_interval(tuple(rng.permutation(zeus)), zeus)  # the same runs, other seeds: a tie
    assert lo < 0 < hi
    noisy = tuple(z + rng.normal(0.002, 0.02) for z in zeus)
    assert paired_interval(noisy, zeus) == paired_interval(noisy, zeus)  # seeded: the same interval every time


def test_bench_warm_from_other_gpu(traces_dir):
    args = ["--traces", str(traces_dir), "--jobs", "sentiment140", "--seeds", "1-2", "--horizon", "5"]
    out = bench(*args, "--warm-from", "other-gpu", "--json")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert {(r["policy"], r["gpu"]) for r in rows} == {(p, g) for p in ("zeus", "zeus-voi") for g in ("v100", "a40")}
    for r in rows:
        if r["policy"] == "zeus":
            assert "warm" not in r and "warm_from" not in r  # zeus has no warm start: it runs cold
        else:
            other = "a40" if r["gpu"] == "v100" else "v100"
            assert r["warm_from"] == f"sentiment140 on {other}, seed {r['seed']}" and r["warm"].startswith("sha256:")
    table = bench(*args, "--warm-from", "other-gpu")
    assert table.returncode == 0, table.stderr
    assert "zeus-voi warm from the next GPU's run (paper horizon)" in table.stdout
    assert "rows worse than zeus (95% paired bootstrap interval" in table.stdout
    one = bench(*args, "--gpus", "v100", "--warm-from", "other-gpu")
    assert one.returncode == 2 and "give two or more GPUs in --gpus" in one.stderr
    old = bench(*args, "--revision", "9", "--warm-from", "other-gpu")
    assert old.returncode == 2 and "revision 10 or later" in old.stderr
