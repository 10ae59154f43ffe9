"""Run directories made by an earlier version still read, audit and what-if after the default policy changed.

``tests/data/runs_v153af36`` holds two run directories written by ``zeus-run
simulate`` at commit 153af36 (before ``zeus-voi`` existed and while ``zeus``
was the default): librispeech on the a40 trace, seed 3, 25 recurrences, with
``zeus`` and with ``zeus-plus``. They are frozen: never regenerate them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.cli.test_run_cli import zeus
from zeus_run.door.opening import choose_run_dir
from zeus_run.engine.replay import Knobs, audit, what_if, with_changes
from zeus_run.errors import RunDirError
from zeus_run.rundir.history import read_history
from zeus_run.spec import parse_spec

OLD = Path(__file__).resolve().parents[1] / "data" / "runs_v153af36"
RUNS = sorted(p.name for p in OLD.iterdir())


def test_the_frozen_runs_are_there():
    assert RUNS == ["librispeech-a40-zeus-plus-seed3", "librispeech-a40-zeus-seed3"]


@pytest.mark.parametrize("name", RUNS)
def test_old_run_audits_exactly(name):
    records = read_history(OLD / name / "history.jsonl")
    knobs = Knobs.from_run_dir(OLD / name)
    assert knobs.optimizer.policy == name.split("-a40-")[1].rsplit("-seed", 1)[0]
    result = audit(records, knobs)
    assert result.divergence is None and result.checked == len(records) > 25


@pytest.mark.parametrize("name", RUNS)
@pytest.mark.parametrize("policy", ["zeus", "zeus-plus", "zeus-voi"])
def test_old_run_what_ifs_under_every_policy(name, policy):
    records = read_history(OLD / name / "history.jsonl")
    knobs = with_changes(Knobs.from_run_dir(OLD / name), policy=policy)
    assert knobs.optimizer.policy == policy
    result = what_if(records, knobs)
    # Every recorded recurrence is replayed, or the replay says where and why it stopped.
    assert result.recurrences == 25 or result.stopped_at is not None
    assert result.unknown is None or result.unknown in knobs.batch_sizes
    if name.endswith("zeus-plus-seed3"):  # its recorded paths all converged: the replay completes
        assert result.recurrences == 25 and result.cost > 0 and result.recorded_cost > 0


@pytest.mark.parametrize("name", RUNS)
def test_old_run_through_the_cli(name):
    out = zeus("replay", str(OLD / name))
    assert out.returncode == 0, out.stderr
    assert "reproduces all" in " ".join(out.stdout.split())
    assert zeus("history", str(OLD / name), "--format", "json").returncode == 0


def test_resuming_an_old_default_run_under_the_new_default_is_refused_with_the_difference(tmp_path):
    """A spec that left the policy to the default meant zeus then (resolved as such) and means zeus-voi now."""
    spec = (
        "name: librispeech\ncommand: [python, train.py]\nbatch_sizes: [8, 16, 32, 64, 128, 192]\n"
        "default_batch_size: 192\ntarget_metric: 40.0\nmax_epochs: 16\nseed: 3\n"
    )
    run_dir = tmp_path / "run"
    shutil.copytree(OLD / "librispeech-a40-zeus-seed3", run_dir)
    # What the earlier version resolved that spec to (its default: zeus, 2 rounds, 2 explorations).
    resolved = parse_spec(spec + "optimizer: {policy: zeus}\n").to_dict()
    assert (resolved["optimizer"]["pruning_rounds"], resolved["optimizer"]["num_explorations"]) == (2, 2)
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(resolved))
    with pytest.raises(RunDirError) as err:
        choose_run_dir(parse_spec(spec), run_dir, new=False, force=False)
    assert "optimizer.policy: 'zeus' -> 'zeus-voi'" in str(err.value)
    assert "--force" in str(err.value)
    # Naming the old policy resumes it.
    path, resumed = choose_run_dir(parse_spec(spec + "optimizer: {policy: zeus}\n"), run_dir, new=False, force=False)
    assert path == run_dir and resumed
