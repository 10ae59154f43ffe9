"""The Hugging Face and Lightning examples with the real packages (marker ``frameworks``).

Each example runs 5 recurrences under ``zeus-run run`` and 5 under each shape of
ask/tell: the script run by the orchestrator after ``zeus-run ask`` and then told
(``zeus-run tell``), and the script wrapped by ``zeus-run exec``. The script is
the same in all three. Each must leave a
saved model for every recurrence that reached the target, and ``zeus-run
replay`` must reproduce every decision. Run them with ``scripts/test_frameworks.sh``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zeus_run.rundir.history import read_history

pytestmark = pytest.mark.frameworks

REPO = Path(__file__).resolve().parents[2]
ZEUS = [sys.executable, "-m", "zeus_run"]
#: Example -> (the package it needs, the model file a converged recurrence leaves in its trial directory).
EXAMPLES = {"hf_tiny": ("transformers", "model"), "lightning_tiny": ("lightning", "model.ckpt")}


@pytest.fixture(params=sorted(EXAMPLES))
def example(request) -> tuple[Path, str]:
    package, model = EXAMPLES[request.param]
    pytest.importorskip("torch", reason="PyTorch is not installed (scripts/test_frameworks.sh installs it)")
    pytest.importorskip(package, reason=f"{package} is not installed (scripts/test_frameworks.sh installs it)")
    return REPO / "configs" / f"{request.param}.yaml", model


def _check(run_dir: Path, model: str) -> None:
    records = read_history(run_dir)
    assert [r.recurrence for r in records if r.reached] == [1, 2, 3, 4, 5]  # every recurrence converged
    for r in records:
        trial_dir = run_dir / "trials" / f"r{r.recurrence:04d}-t{r.attempt:02d}"
        assert (trial_dir / model).exists() == r.reached, trial_dir
    replay = subprocess.run([*ZEUS, "replay", str(run_dir)], capture_output=True, text=True)
    assert replay.returncode == 0, replay.stdout + replay.stderr


def test_example_runs_five_recurrences_under_zeus_run(example, tmp_path):
    spec, model = example
    run_dir = tmp_path / "runs"
    done = subprocess.run([*ZEUS, "run", str(spec), "--run-dir", str(run_dir)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    _check(run_dir, model)


@pytest.mark.parametrize("shape", ["tell", "exec"])
def test_example_runs_five_recurrences_under_ask_and_tell(example, shape, tmp_path):
    spec, model = example
    run_dir = tmp_path / "runs"
    for _ in range(5):
        asked = subprocess.run(
            [*ZEUS, "ask", str(spec), "--run-dir", str(run_dir), "--format", "json"],
            capture_output=True,
            text=True,
        )
        assert asked.returncode == 0, asked.stderr
        decision = json.loads(asked.stdout)
        env = {**os.environ, **decision["env"]}
        script = decision["command"]
        if shape == "tell":  # the orchestrator runs the script, then tells
            ran = subprocess.run(script, cwd=REPO, env=env, capture_output=True, text=True)
            told = subprocess.run(
                [*ZEUS, "tell", str(run_dir), decision["token"], "--exit-code", str(ran.returncode)],
                capture_output=True,
                text=True,
            )
            assert told.returncode == 0, ran.stderr[-3000:] + told.stderr
        else:  # the orchestrator wraps it: measured and stopped by the trial agent, told on exit
            ran = subprocess.run([*ZEUS, "exec", "--", *script], cwd=REPO, env=env, capture_output=True, text=True)
            assert ran.returncode == 0, ran.stderr[-3000:]
    _check(run_dir, model)
