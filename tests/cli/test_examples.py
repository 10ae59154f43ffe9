"""The example jobs in configs/: every spec is valid, and the examples run end to end.

The PyTorch examples need torch (``pip install torch``; these machines install a CPU
build of torch==2.13.0 from a local file); without it those tests skip. They are marked ``frameworks``:
`scripts/test_frameworks.sh` installs torch and runs them, with the Hugging Face and Lightning examples.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.factories import CliResult, zeus_run_cli
from zeus_run.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_every_example_spec_is_valid(config):
    spec = load_spec(config)
    assert spec.default_batch_size in spec.batch_sizes
    for arg in spec.command:
        if arg.endswith(".py"):
            assert (spec.workdir / arg).is_file(), f"{config.name}: {arg} is not in the repository"


def small_copy(config: str, tmp_path: Path, recurrences: int, extra_args: list[str], **changes) -> Path:
    """The example with fewer recurrences, a run directory under tmp_path and extra script arguments."""
    data = yaml.safe_load((REPO / "configs" / config).read_text())
    data.update(recurrences=recurrences, workdir=str(REPO), run_dir=str(tmp_path / "run"), **changes)
    data["command"] = [*data["command"], *extra_args]
    out = tmp_path / config
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def run(spec: Path) -> CliResult:
    """``zeus-run run SPEC`` in-process; the example's training script runs as a process."""
    return zeus_run_cli("run", spec, "--no-output", env={"COLUMNS": "200"})


def records(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]


def test_regex_example_reads_an_unmodified_script(tmp_path):
    # zeus: its pruning runs a second batch size in recurrence 2 (zeus-voi does not explore with one recurrence left)
    spec = small_copy("keras-style-regex.yaml", tmp_path, 2, [], optimizer={"policy": "zeus"})
    r = run(spec)
    assert r.returncode == 0, r.stderr
    recs = records(tmp_path)
    assert [x["batch_size"] for x in recs if x["reached"]][:2] == [1024, 512]
    first = recs[0]
    assert first["reached"] and first["epochs"] == len(first["metrics"]) >= 2
    assert first["metrics"][-1] >= 0.815 > first["metrics"][0]


@pytest.mark.frameworks  # scripts/test_frameworks.sh installs torch (CPU) and runs it
def test_pytorch_example_trains_a_tiny_model_on_the_cpu(tmp_path):
    pytest.importorskip("torch")
    spec = small_copy(
        "pytorch.yaml",
        tmp_path,
        2,
        ["--train-size", "4000", "--hidden", "16"],
        env={"OMP_NUM_THREADS": 1, "CUDA_VISIBLE_DEVICES": ""},
        target_metric=0.8,
        energy={"source": "estimate", "watts": 65},
    )
    r = run(spec)
    assert r.returncode == 0, r.stderr
    recs = records(tmp_path)
    converged = [x for x in recs if x["reached"]]
    assert len(converged) == 2 and converged[0]["batch_size"] == 1024
    assert all(x["metrics"][-1] >= 0.8 for x in converged)
    assert recs[0]["learning_rate"] == pytest.approx(0.05)


@pytest.mark.frameworks
def test_pytorch_ddp_example_stops_every_rank(tmp_path):
    pytest.importorskip("torch")
    if os.cpu_count() is not None and os.cpu_count() < 2:
        pytest.skip("needs two CPUs for two torchrun processes")
    spec = small_copy(
        "pytorch-ddp.yaml",
        tmp_path,
        1,
        ["--train-size", "4000", "--hidden", "16"],
        env={"OMP_NUM_THREADS": 1, "CUDA_VISIBLE_DEVICES": ""},
        target_metric=0.8,
        energy={"source": "estimate", "watts": 65},
    )
    text = spec.read_text().replace("- '4'\n", "- '2'\n")  # --nproc_per_node 2
    assert "- '2'\n" in text
    spec.write_text(text)
    r = run(spec)
    assert r.returncode == 0, r.stderr
    (rec,) = records(tmp_path)
    assert rec["reached"] and rec["batch_size"] == 1024 and rec["exit_code"] is not None
    log = (tmp_path / "run" / rec["log"]).read_text()
    assert "(512/rank x 2)" in log
