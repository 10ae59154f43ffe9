"""Shared fixtures: paths to the shared traces and small helpers for writing specs."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces"
SCRIPTS = Path(__file__).resolve().parent / "scripts"


@pytest.fixture
def traces_dir() -> Path:
    """The Zeus paper's traces (../shared/traces); skip if this checkout has none beside it."""
    if not (TRACES / "summary_train.csv").exists():
        pytest.skip("../shared/traces is not beside this checkout")
    return TRACES


@pytest.fixture
def write_spec(tmp_path: Path):
    """Write a job spec YAML into tmp_path and return its path."""

    def write(body: str, name: str = "job.yaml") -> Path:
        p = tmp_path / name
        p.write_text(textwrap.dedent(body))
        return p

    return write


PYTHON = sys.executable
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/fake_nvml.py

from tests.slurm_helpers import slurm_cluster  # noqa: E402, F401  (the `slurm` tests' fixture)
