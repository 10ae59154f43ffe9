"""`Knobs` is built once (`Knobs.from_spec` / `from_mapping`) and reaches every user: run, resume, the history check, replay, simulation."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tests.test_fallback import LoadedMachine
from zeus_run.door.opening import compatibility, history_mismatches
from zeus_run.engine.core import Engine
from zeus_run.engine.knobs import Knobs
from zeus_run.engine.replay import audit
from zeus_run.rundir.store import RunDir
from zeus_run.spec import OptimizerSettings, parse_spec

SPEC = """
name: k
command: [python, train.py]
batch_sizes: [8, 16, 32, 64]
default_batch_size: 16
target_metric: 0.9
max_epochs: 10
beta: 2.0
seed: 1
recurrences: 30
optimizer: {policy: zeus-voi, revision: 1}
"""


def fallback_history() -> list:
    """A run under the spec's default fallback rule (max_early_stops 3) on a machine that gets loaded.

    (zeus-voi revision 1: the paper's early-stop rule, which the load makes fail without the fallback.)
    """
    knobs = Knobs.from_spec(parse_spec(SPEC))
    assert knobs.max_early_stops == 3
    records = knobs.engine(30).run([], LoadedMachine(quiet=8, load=2.5))
    assert any(r.stage == "fallback" for r in records)
    return [dataclasses.replace(r, kind="simulated") for r in records]  # costs are the machine's, not eta's


def test_history_check_of_a_run_that_used_the_fallback_rule_agrees_with_its_spec(tmp_path):
    """The reproduction: with spec.yaml missing, the history is replayed under the spec's knobs.

    Built field by field, the check's knobs left out max_early_stops (and concurrency):
    the run "diverged at trial #11" and resuming it was refused.
    """
    spec = parse_spec(SPEC)
    records = fallback_history()
    assert history_mismatches(records, spec, full=True) == []
    # What the old construction did: the same knobs without the fallback rule.
    without = dataclasses.replace(Knobs.from_spec(spec), max_early_stops=None)
    assert audit(records, without).divergence is not None
    # And the run resumes: its directory, without spec.yaml, is compatible with the spec.
    with RunDir.open(tmp_path / "run") as rd:
        for r in records:
            rd.history.append(r)
    assert compatibility(tmp_path / "run", spec) == ([], True)


#: One changed value per `Knobs` field, as a spec line.
CHANGES = {
    "batch_sizes": "batch_sizes: [8, 16, 32]",
    "default_batch_size": "default_batch_size: 8",
    "eta": "eta: 0.25",
    "beta": "beta: 3.0",
    "seed": "seed: 7",
    "optimizer": "optimizer: {policy: zeus}",
    "target_metric": "target_metric: 0.8",
    "higher_is_better": "higher_is_better: false",
    "max_epochs": "max_epochs: 12",
    "max_tries": "max_tries: 9",
    "max_early_stops": "max_early_stops: 1",
    "concurrency": "concurrency: 2",
    "horizon": "recurrences: 12",
    "lifetime": "lifetime: 40",
    "objective": "objective: {kind: max-slowdown, factor: 1.2}",
    "control_share": "saving: {control: {max_share: 0.1}}",
    "oom_retry_after": "oom_retry_after: 2",
}
#: Knobs fields that are not spec settings (read from the run directory: b0's profile, the warm start's copy).
NOT_IN_SPEC = {"default_profile", "warm"}


def with_line(line: str) -> str:
    key = line.split(":")[0]
    kept = [ln for ln in SPEC.splitlines() if not ln.startswith(key + ":")]
    return "\n".join([*kept, line]) + "\n"


def test_every_knob_has_a_one_at_a_time_change():
    assert set(CHANGES) == {f.name for f in dataclasses.fields(Knobs)} - NOT_IN_SPEC


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_one_knob_changed_reaches_every_user_of_knobs(tmp_path, field):
    base_spec, spec = parse_spec(SPEC), parse_spec(with_line(CHANGES[field]))
    base, knobs = Knobs.from_spec(base_spec), Knobs.from_spec(spec)
    # run: the spec's knobs differ in exactly that field (an objective sets eta too)
    differ = {f.name for f in dataclasses.fields(Knobs) if getattr(base, f.name) != getattr(knobs, f.name)}
    assert differ == {field} or (field == "objective" and differ == {"objective", "eta"})
    # resume and replay: the run directory's spec.yaml reads back to the same knobs
    with RunDir.open(tmp_path / "run") as rd:
        rd.save_spec(spec)
    assert Knobs.from_run_dir(tmp_path / "run") == knobs
    # simulation: a simulated run's spec.yaml (`Knobs.to_dict`) reads back to the same knobs
    assert Knobs.from_mapping(knobs.to_dict()) == knobs
    # the engine every user runs is made from all of them
    engine = knobs.engine(5)
    assert isinstance(engine, Engine)
    made = {
        "batch_sizes": tuple(engine.optimizer.batch_sizes),
        "default_batch_size": engine.optimizer.default_batch_size,
        "beta": engine.beta,
        "max_tries": engine.max_tries,
        "max_early_stops": engine.max_early_stops,
        "concurrency": engine.concurrency,
        "control_share": engine.control_share,
    }
    if field in made:
        assert made[field] == getattr(knobs, field)


def test_old_run_directories_without_newer_knobs_read_with_their_defaults():
    knobs = Knobs.from_mapping(
        {
            "batch_sizes": [8, 16],
            "default_batch_size": 8,
            "eta": 0.5,
            "beta": None,
            "seed": 1,
            "optimizer": {"policy": "zeus"},
            "target_metric": 0.9,
        }
    )
    assert (knobs.max_early_stops, knobs.concurrency, knobs.max_tries, knobs.beta) == (None, 1, 20, None)
    assert knobs.optimizer == OptimizerSettings.for_policy("zeus", revision=1)  # recorded before revisions
    assert math.isclose(knobs.eta, 0.5)
