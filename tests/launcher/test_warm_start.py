"""The warm start end to end: two GPU specs of one job on the NVML double, the second warm from the first."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.cli.test_run_cli import zeus
from tests.fake_nvml import FakeGpu, FakeNvml
from zeus_run.energy import NvmlEnergy
from zeus_run.engine.knobs import Knobs
from zeus_run.engine.replay import audit
from zeus_run.engine.warm import WARM_NAME, fingerprint
from zeus_run.errors import HistoryError, SpecError
from zeus_run.launcher import run_job
from zeus_run.records import TrialRecord
from zeus_run.rundir.history import read_history
from zeus_run.spec import load_spec

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
REPO = Path(__file__).resolve().parents[2]
FAKE_PYNVML = Path(__file__).resolve().parents[1] / "fake_pynvml"

#: Epochs each batch size needs (the job's, on any GPU): 16 is the cheapest.
NEEDS = "8:4,16:2,32:3,64:5,128:8"


def write_spec(path: Path, run_dir: Path, *, name: str = "warmjob", target: float = 0.9, extra: str = "") -> Path:
    path.write_text(
        textwrap.dedent(f"""
            name: {name}
            command: ["{{python}}", "{SCRIPTS / "fake_train.py"}", "--needs", "{NEEDS}", "--epoch-time", "0.2"]
            workdir: {path.parent}
            run_dir: {run_dir}
            batch_sizes: [8, 16, 32, 64, 128]
            default_batch_size: 64
            target_metric: {target}
            max_epochs: 10
            recurrences: 8
            energy: {{source: nvml}}
            power_limit: {{enabled: false}}
        """)
        + extra
    )
    return path


def run(spec_path: Path, gpu_watts: float, **kw):
    """``run_job`` on one NVML double drawing ``gpu_watts`` of its 300 W (another GPU: another power)."""
    nv = FakeNvml([FakeGpu(min_mw=100_000, max_mw=300_000, limit_mw=300_000, power_fn=lambda t, lim: gpu_watts)])
    with NvmlEnergy(None, nvml=nv, environ={}) as energy:
        return run_job(load_spec(spec_path), energy=energy, **kw)


@pytest.fixture(scope="module")
def _cold_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job's run directory on the first GPU: eight recurrences, cold (run once for the module)."""
    root = tmp_path_factory.mktemp("cold")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(REPO))
        spec = write_spec(root / "v100.yaml", root / "runs" / "v100")
        result = run(spec, 200.0)
    assert len({r.batch_size for r in result.new}) >= 2 and all(r.warm is None for r in result.new)
    return result.run_dir


@pytest.fixture
def source(tmp_path, monkeypatch, _cold_source: Path) -> Path:
    """A copy of the cold run directory of the first GPU, in this test's own directory."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    copy = tmp_path / "runs" / "v100"
    shutil.copytree(_cold_source, copy)
    return copy


def test_the_second_gpu_starts_warm_from_the_first_and_replays_without_it(tmp_path, source):
    spec = write_spec(tmp_path / "a100.yaml", tmp_path / "runs" / "a100", extra=f"optimizer: {{warm_from: {source}}}\n")
    result = run(spec, 250.0)
    new = result.new
    source_records = read_history(source / "history.jsonl")
    # b0 first; every record names the source it was decided with
    assert new[0].batch_size == 64
    assert {r.warm for r in new} == {fingerprint(source_records)}
    # the source's cheapest batch size is probed next, from what the source saw
    assert new[1].detail.startswith("warm:") and new[1].batch_size < 64
    # the run directory keeps the source's records
    kept = json.loads((result.run_dir / WARM_NAME).read_text())
    assert kept["source"] == str(source) and len(kept["records"]) == len(source_records)
    # the source moves away: the audit reads the copy and reproduces every decision
    shutil.move(str(source), str(tmp_path / "moved"))
    assert audit(new, Knobs.from_run_dir(result.run_dir)).divergence is None
    shown = zeus("replay", str(result.run_dir))
    assert shown.returncode == 0, shown.stderr
    # the run goes on from the copy with a spec that leaves warm_from out (run --warm-from was given once)
    cold_spec = write_spec(tmp_path / "a100-again.yaml", tmp_path / "runs" / "a100")
    more = run(cold_spec, 250.0, next_recurrences=1)
    assert len(more.new) == 1 and more.new[0].warm == fingerprint(source_records)
    # a copy that was edited is refused, never silently replayed
    kept["records"] = kept["records"][1:]
    (result.run_dir / WARM_NAME).write_text(json.dumps(kept))
    with pytest.raises(HistoryError, match="fingerprint"):
        Knobs.from_run_dir(result.run_dir)


def nvml_zeus(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """``zeus-run ARGS`` whose ``import pynvml`` is the NVML double (tests/fake_pynvml): one 300 W GPU drawing 250 W."""
    nodes = tmp_path / "nvml.json"
    nodes.write_text(json.dumps({"local": {"gpus": [{"max_mw": 300_000, "min_mw": 100_000, "draw_w": 250.0}]}}))
    env = {**os.environ, "PYTHONPATH": f"{FAKE_PYNVML}{os.pathsep}{REPO}", "FAKE_NVML_NODES": str(nodes)}
    cmd = [sys.executable, "-m", "zeus_run", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)


def test_run_warm_from_on_the_command_line(tmp_path, source):
    spec = write_spec(tmp_path / "a100.yaml", tmp_path / "runs" / "a100")
    out = nvml_zeus(tmp_path, "run", str(spec), "--warm-from", str(source), "-n", "2", "-q")
    assert out.returncode == 0, out.stderr
    records = read_history(tmp_path / "runs" / "a100" / "history.jsonl")
    assert [r.energy_source for r in records] == ["nvml", "nvml"]
    assert all(r.warm == fingerprint(read_history(source / "history.jsonl")) for r in records)
    assert (tmp_path / "runs" / "a100" / WARM_NAME).is_file()
    assert zeus("replay", str(tmp_path / "runs" / "a100")).returncode == 0


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"name": "otherjob"}, "name differs"),
        ({"target": 0.8}, "target_metric is 0.9 there, 0.8 here"),
        ({"extra": "metric: {source: regex, regex: 'val_acc=([0-9.]+)'}\n"}, "metric.source is 'events' there"),
    ],
)
def test_a_source_of_another_job_metric_or_target_is_refused(tmp_path, source, change, says):
    extra = change.pop("extra", "") + f"optimizer: {{warm_from: {source}}}\n"
    spec = write_spec(tmp_path / "other.yaml", tmp_path / "runs" / "other", extra=extra, **change)
    with pytest.raises(SpecError) as caught:
        run(spec, 250.0)
    text = str(caught.value)
    assert "optimizer.warm_from" in text and str(source) in text and says in text
    assert "Name a run directory of this job" in text  # the fix
    assert not (tmp_path / "runs" / "other").exists()  # nothing was run, nothing left behind
    out = zeus("run", str(spec), "-q", cwd=tmp_path)
    assert out.returncode == 2 and "optimizer.warm_from" in out.stderr and "Traceback" not in out.stderr


def test_a_source_that_is_not_a_run_directory_or_a_policy_without_a_warm_start_is_refused(tmp_path):
    spec = write_spec(
        tmp_path / "a.yaml", tmp_path / "runs" / "a", extra=f"optimizer: {{warm_from: {tmp_path / 'nowhere'}}}\n"
    )
    with pytest.raises(SpecError, match="is not a run directory zeus-run recorded"):
        run(spec, 250.0)
    zeus_spec = write_spec(
        tmp_path / "z.yaml", tmp_path / "runs" / "z", extra=f"optimizer: {{policy: zeus, warm_from: {tmp_path}}}\n"
    )
    with pytest.raises(SpecError, match="a warm start needs policy zeus-voi, revision 10 or later"):
        load_spec(zeus_spec)
    plain = write_spec(tmp_path / "p.yaml", tmp_path / "runs" / "p", extra="optimizer: {revision: 9}\n")
    out = zeus("run", str(plain), "--warm-from", str(tmp_path), cwd=tmp_path)
    assert out.returncode == 2 and "--warm-from: a warm start needs policy zeus-voi, revision 10" in out.stderr


def test_a_relative_warm_from_starts_at_the_spec_file_s_folder(tmp_path):
    os.makedirs(tmp_path / "specs")
    spec = write_spec(tmp_path / "specs" / "a.yaml", tmp_path / "runs" / "a", extra="optimizer: {warm_from: ../v}\n")
    assert load_spec(spec).optimizer.warm_from == str((tmp_path / "v").resolve())


def test_ask_and_tell_start_warm_from_the_spec(tmp_path):
    """The doors that let others launch trials (ask/tell, exec, the server) read the spec's warm_from."""
    from zeus_run.asktell import ask, report_epoch, tell

    needs = {8: 4, 16: 2, 32: 3, 64: 5}

    def trial(job: Path) -> TrialRecord:
        a = ask(job)
        for epoch in range(1, a.max_epochs + 1):
            time.sleep(0.1)  # an epoch's work: the estimate charges wall time
            if report_epoch(a.run_dir, a.token, epoch, 1.0 if epoch >= needs[a.batch_size] else 0.5) is not None:
                break
        return tell(a.run_dir, a.token, exit_code=0)

    def spec(name: str, extra: str = "", recurrences: int = 6) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            textwrap.dedent(f"""
                name: asked
                command: [python, train.py]
                batch_sizes: [8, 16, 32, 64]
                default_batch_size: 64
                target_metric: 0.9
                max_epochs: 8
                recurrences: {recurrences}
                energy: {{source: estimate, watts: 100, basis: wall-time}}
                run_dir: {tmp_path / name}
            """)
            + extra
        )
        return path

    first = spec("first", recurrences=20)  # long enough to explore: it finds 16 (2 epochs against b0's 5)
    seen = [trial(first) for _ in range(12)]
    assert all(r.warm is None for r in seen) and 16 in {r.batch_size for r in seen}
    second = spec("second", f"optimizer: {{warm_from: {tmp_path / 'first'}}}\n")
    told = [trial(second) for _ in range(3)]
    source = fingerprint(read_history(tmp_path / "first" / "history.jsonl"))
    assert [r.warm for r in told] == [source] * 3
    # b0 first, then (six recurrences are too few for a cold walk to explore) the source's cheapest
    assert told[0].batch_size == 64 and told[1].batch_size == 16 and told[1].detail.startswith("warm:")
    assert audit(told, Knobs.from_run_dir(tmp_path / "second")).divergence is None
