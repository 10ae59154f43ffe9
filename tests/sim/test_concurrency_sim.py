"""Overlapping recurrences in the trace simulator, ``zeus-run simulate --concurrency`` and the benchmark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TRACES
from tests.factories import CliResult, zeus_run_cli
from tests.sim_helpers import write_tiny_traces
from zeus_run.optimizer import PruningState
from zeus_run.sim import JOBS, job_table, load_traces, simulate
from zeus_run.spec import POLICIES, OptimizerSettings

REPO = Path(__file__).resolve().parents[2]
#: The paper's policy (pruning exploration then Thompson Sampling).
ZEUS = OptimizerSettings.for_policy("zeus")


def zr(*args: str) -> CliResult:
    return zeus_run_cli(*args, cwd=REPO)


# One xdist worker runs the whole module and its module-scoped fixture (`.ci/run`: -n 2 --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_concurrency_sim")


@pytest.fixture(scope="module")
def cifar(request):
    traces = TRACES
    if not (traces / "summary_train.csv").exists():
        pytest.skip("../shared/traces is not beside this checkout")
    return job_table(load_traces(traces / "summary_train.csv", traces / "summary_power_v100.csv"), JOBS["cifar100"])


def test_simulate_with_one_recurrence_in_flight_is_the_serial_simulation(cifar):
    for policy in POLICIES:
        settings = OptimizerSettings.for_policy(policy)
        serial = simulate(cifar, seed=4, settings=settings, baselines=False)
        one = simulate(cifar, seed=4, settings=settings, baselines=False, concurrency=1)
        assert [r.to_json() for r in one.records] == [r.to_json() for r in serial.records]
        assert all(r.seen is None for r in one.records)


@pytest.mark.parametrize("n", [2, 4])
def test_simulated_trials_end_in_order_of_simulated_wall_time(cifar, n):
    res = simulate(cifar, seed=3, baselines=False, concurrency=n, horizon=60, settings=ZEUS)
    assert sum(r.reached for r in res.records) == 60
    assert max(len(r.in_flight) for r in res.records) == n - 1
    # The model: a trial starts when the trial whose result it follows ended (the record before
    # its `seen`; at 0 for the first ones), runs `time` seconds, and the history is in order of ends.
    end_of: dict[int, float] = {}
    for r in sorted(res.records, key=lambda r: r.trial):
        start = 0.0 if r.seen == 0 else end_of[res.records[r.seen - 1].trial]
        end_of[r.trial] = start + r.time
    ends = [end_of[r.trial] for r in res.records]
    assert ends == sorted(ends)
    assert ends != [end_of[t] for t in sorted(end_of)]  # which is not the order they started


def test_overlap_explores_with_the_best_known_while_pruning_waits(cifar):
    serial = simulate(cifar, seed=1, baselines=False, settings=ZEUS)
    four = simulate(cifar, seed=1, baselines=False, concurrency=4, settings=ZEUS)
    concurrent = [r for r in four.records if r.detail.startswith("concurrent")]
    assert concurrent and all(r.stage == "pruning" and r.probe is False for r in concurrent)
    probes = [r for r in four.records if r.probe]
    # Pruning runs one trial at a time and moves on its own results alone, in the published order.
    assert [r.trial for r in probes] == sorted(r.trial for r in probes)
    state = PruningState.begin(cifar.batch_sizes, cifar.default_batch_size, 2)
    for r in probes:
        assert r.batch_size == state.expecting
        state = state.observe(r.batch_size, r.cost, r.reached)
    assert state.done
    # It waits longer between them, in recurrences: the others run meanwhile.
    assert max(r.recurrence for r in probes) > max(r.recurrence for r in serial.records if r.stage == "pruning")


def test_simulate_concurrency_cli_writes_run_dirs_that_audit(tmp_path, cifar):
    runs = tmp_path / "runs"
    traces = TRACES
    out = zr(
        "simulate", "cifar100", "--traces", str(traces), "--seeds", "2", "--horizon", "50",
        "--concurrency", "3", "--policy", "zeus-voi", "--format", "json", "--run-dir", str(runs),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["concurrency"] == 3
    run = runs / "cifar100-v100-zeus-voi-seed2"
    assert "concurrency: 3" in (run / "spec.yaml").read_text()
    ok = zr("replay", str(run))
    assert ok.returncode == 0 and "reproduces all" in ok.stdout, ok.stdout + ok.stderr
    hist = run / "history.jsonl"
    lines = hist.read_text().splitlines()
    p = next(i for i, line in enumerate(lines) if i > 20 and json.loads(line)["in_flight"])
    rec = json.loads(lines[p])
    rec["draw"] += 1
    lines[p] = json.dumps(rec)
    hist.write_text("\n".join(lines) + "\n")
    bad = zr("replay", str(run))
    assert bad.returncode == 1 and f"trial #{p}: draw recorded {rec['draw']}" in bad.stderr
    table = zr("simulate", "cifar100", "--traces", str(traces), "--seeds", "1", "--horizon", "20", "--concurrency", "2")
    assert table.returncode == 0 and "2 recurrences in flight" in table.stdout


def test_simulate_refuses_zero_concurrency(tmp_path):
    d = write_tiny_traces(tmp_path / "traces")
    out = zr("simulate", "squad", "--traces", str(d), "--gpu", "tiny", "--concurrency", "0")
    assert out.returncode == 2 and "--concurrency" in out.stderr and "Traceback" not in out.stderr


def bench(*args: str) -> subprocess.CompletedProcess:
    script = REPO / "scripts" / "bench_optimizer.py"
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)


def test_bench_compares_concurrency(tmp_path, cifar):
    traces = TRACES
    common = ("--traces", str(traces), "--gpus", "v100", "--jobs", "cifar100", "--seeds", "1-2", "--workers", "1")
    out = bench(*common, "--policies", "zeus,zeus-plus", "--concurrency", "1,4")
    assert out.returncode == 0, out.stderr
    assert "concurrency 1,4" in out.stdout and "== 4 recurrence(s) in flight ==" in out.stdout
    lines = out.stdout.splitlines()
    i = lines.index(next(line for line in lines if line.startswith("What overlap costs")))
    assert lines[i + 1].split()[:3] == ["policy", "N=1", "N=4"]
    zeus_row = lines[i + 2].split()
    assert zeus_row[0] == "zeus"
    # The figures are the medians the simulator gives.
    for col, n in ((1, 1), (2, 4)):
        regrets = sorted(simulate(cifar, seed=s, baselines=False, concurrency=n, settings=ZEUS).regret for s in (1, 2))
        assert zeus_row[col] == f"{(regrets[0] + regrets[1]) / 2 * 100:.2f}%"
    js = bench(*common, "--policies", "zeus", "--concurrency", "2", "--json")
    assert js.returncode == 0 and {json.loads(line)["concurrency"] for line in js.stdout.splitlines()} == {2}
    bad = bench(*common, "--concurrency", "0")
    assert bad.returncode == 2 and "--concurrency '0'" in bad.stderr
