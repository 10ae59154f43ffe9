"""``zeus-run simulate`` end to end on the tiny trace, and ``zeus-run history`` on its run directory."""

from __future__ import annotations

import json
from pathlib import Path

from tests.factories import CliResult, zeus_run_cli
from tests.sim_helpers import write_tiny_traces

REPO = Path(__file__).resolve().parents[2]


def zr(*args: str) -> CliResult:
    return zeus_run_cli(*args, cwd=REPO)


def test_simulate_json_run_dir_and_history(tmp_path):
    d = write_tiny_traces(tmp_path / "traces")
    runs = tmp_path / "runs"
    out = zr(
        "simulate",
        "squad",
        "--traces",
        str(d),
        "--gpu",
        "tiny",
        "--seeds",
        "1",
        "--format",
        "json",
        "--run-dir",
        str(runs),
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["workload"] == "squad" and summary["horizon"] == 8
    (run,) = runs.glob("squad-tiny-*-seed1")
    lines = (run / "history.jsonl").read_text().splitlines()
    assert len(lines) == summary["trials"]
    assert json.loads(lines[0])["kind"] == "simulated"
    hist = zr("history", str(run), "--format", "json")
    assert hist.returncode == 0, hist.stderr


def test_simulate_errors_are_clear(tmp_path):
    d = write_tiny_traces(tmp_path / "traces")
    out = zr("simulate", "mnist", "--traces", str(d), "--gpu", "tiny")
    assert out.returncode == 2 and "unknown job 'mnist'" in out.stderr
    out = zr("simulate", "squad", "--traces", str(d), "--gpu", "tiny", "--horizon", "soon")
    assert out.returncode == 2 and "--horizon" in out.stderr


def test_simulated_zeus_plus_run_replays_decision_for_decision(tmp_path):
    d = write_tiny_traces(tmp_path / "traces")
    runs = tmp_path / "runs"
    out = zr("simulate", "squad", "--traces", str(d), "--gpu", "tiny", "--policy", "zeus-plus", "--run-dir", str(runs))
    assert out.returncode == 0, out.stderr
    run = runs / "squad-tiny-zeus-plus-seed1"
    # The run directory records the policy's own defaults, so the audit re-derives every decision.
    audit = zr("replay", str(run))
    assert audit.returncode == 0, audit.stdout + audit.stderr
    bad = zr("simulate", "squad", "--traces", str(d), "--gpu", "tiny", "--policy", "greedy")
    assert bad.returncode == 2 and "greedy" in bad.stderr and "Traceback" not in bad.stderr
