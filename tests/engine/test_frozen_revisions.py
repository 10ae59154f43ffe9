"""Run directories recorded under ``zeus-voi`` revisions 9 and 10 before the optimizer's restructure still replay.

``tests/data/runs_vcbb3f2d`` holds four run directories written by the simulator at commit cbb3f2d, before revision
10 became the live policy (`zeus_run.optimizer.voi`) and revisions 1-9 moved to the legacy room
(`zeus_run.optimizer.legacy`): sentiment140 on the a40 trace under each revision, and a noisy run (a sixth of the
recurrences 1.5-3x slow: second looks, retries) under each. Revision 10's bandit was then recorded as ``thompson``.
They are frozen: never regenerate them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from zeus_run.engine.replay import Knobs, audit
from zeus_run.rundir.history import read_history

FROZEN = Path(__file__).resolve().parents[1] / "data" / "runs_vcbb3f2d"
RUNS = sorted(p.name for p in FROZEN.iterdir())


def test_the_frozen_runs_are_there():
    assert RUNS == [
        "cifar100-a40-r9-seed3-noisy",
        "movielens-1m-v100-r10-seed2-noisy",
        "sentiment140-a40-r10-seed1",
        "sentiment140-a40-r9-seed1",
    ]


@pytest.mark.parametrize("name", RUNS)
def test_a_run_recorded_before_the_restructure_audits_exactly_under_its_revision(name):
    records = read_history(FROZEN / name / "history.jsonl")
    knobs = Knobs.from_run_dir(FROZEN / name)
    assert knobs.optimizer.revision == int(name.split("-r")[-1].split("-")[0])
    result = audit(records, knobs)
    assert result.divergence is None and result.checked == len(records) == 24


@pytest.mark.parametrize(
    ("name", "other"), [("cifar100-a40-r9-seed3-noisy", 10), ("movielens-1m-v100-r10-seed2-noisy", 9)]
)
def test_under_the_other_revision_the_same_records_diverge(name, other):
    """The audit tells the revisions apart: the exact replays above are not a check that cannot fail."""
    records = read_history(FROZEN / name / "history.jsonl")
    knobs = Knobs.from_run_dir(FROZEN / name)
    knobs = dataclasses.replace(knobs, optimizer=dataclasses.replace(knobs.optimizer, revision=other))
    assert audit(records, knobs).divergence is not None
