"""The trial contract (zeus_run/contract/): stop reasons with behaviour, names, the running.json marker, crash causes."""

from __future__ import annotations

import json

import pytest

from zeus_run.contract import (
    STOP_REASONS,
    Env,
    RunningMarker,
    StopReason,
    TrialFiles,
    TrialOutcome,
    crash_cause,
    markers_from_json,
    markers_to_json,
)


def test_stop_reasons_carry_their_behaviour():
    unobserved = {r.value for r in StopReason if not r.observed}
    assert unobserved == {"interrupted", "infrastructure", "config_error", "environment_error"}
    assert {r.value for r in StopReason if r.finishing} == {"target_reached", "max_epochs"}
    assert {r.value for r in StopReason if r.early_stop} == {"cost_threshold", "skipped", "no_progress"}
    assert {r.value for r in StopReason if r.judged} == {
        "target_reached",
        "max_epochs",
        "cost_threshold",
        "skipped",
        "no_progress",
    }
    assert {r.value for r in StopReason if r.failure} == {"crashed", "timeout", "exited", "infrastructure"}
    assert {r.value for r in StopReason if r.infrastructure} == {"infrastructure"}
    assert set(STOP_REASONS) == {r.value for r in StopReason}


def test_a_stop_reason_is_its_string_in_json_and_text():
    assert StopReason.CRASHED == "crashed" and f"{StopReason.CRASHED}" == "crashed" == str(StopReason.CRASHED)
    assert json.dumps({"r": StopReason.TIMEOUT}) == '{"r": "timeout"}'
    assert StopReason.parse("skipped") is StopReason.SKIPPED
    with pytest.raises(ValueError, match="unknown stop_reason 'nope'"):
        StopReason.parse("nope")


def test_names_of_the_contract():
    assert "ZEUS_BATCH_SIZE" in Env.names() and "ZEUS_TRIAL_TOKEN" in Env.names() and len(Env.names()) == 25 + 8
    assert {"ZEUS_RUN_DIR", "ZEUS_ASK_TOKEN", "ZEUS_HEARTBEAT", "ZEUS_LEASE", "ZEUS_METRIC_NAME"} <= set(Env.names())
    assert "ZEUS_ASK_ENERGY" in Env.names()  # the counter a shell's ask read, for the script's start-up
    assert {"ZEUS_ENERGY", "ZEUS_TIMEOUT"} <= set(Env.names())  # the training side measures and stops alike
    server = {Env.SERVER, Env.SERVER_TOKEN, Env.SERVER_TOKEN_FILE, Env.SERVER_JOB, Env.SERVER_TRIAL, Env.SERVER_SPEC}
    assert server <= set(Env.names()) and all(n.startswith("ZEUS_SERVER") for n in server)  # the server's six
    assert TrialFiles.dir_name(3, 1) == "r0003-t01"
    assert TrialFiles.OUTCOME == "outcome.json"


def marker(**changes) -> RunningMarker:
    base = dict(recurrence=2, attempt=1, trial=3, batch_size=8, stage="pruning", cost_threshold=12.5, seed=7)
    return RunningMarker(**{**base, **changes})


@pytest.mark.parametrize(
    "markers",
    [
        [marker()],
        [marker(seen=2, in_flight=(1, 2), draw=1, probe=True)],  # one concurrent marker: its own in_flight list
        [marker(trial=4, seen=3, in_flight=(3,)), marker(seen=2, in_flight=(2,))],
    ],
)
def test_running_markers_round_trip_through_json(markers):
    data = json.loads(json.dumps(markers_to_json(markers)))
    assert markers_from_json(data) == (sorted(markers, key=lambda m: m.trial), 0)


@pytest.mark.parametrize(
    "change",
    [
        {"batch_size": True},
        {"batch_size": -1},
        {"batch_size": 0},
        {"trial": 2**64},
        {"recurrence": "2"},
        {"attempt": None},
        {"trial": 1.5},
    ],
)
def test_a_marker_with_a_damaged_decision_is_dropped(change):
    data = {**marker().to_json(), **change}
    assert RunningMarker.from_json(data) is None
    assert markers_from_json({"in_flight": [data, marker(trial=9).to_json()]}) == ([marker(trial=9)], 1)


@pytest.mark.parametrize(
    "field, value", [("cost_threshold", float("nan")), ("cost_threshold", "1"), ("stage", 3), ("in_flight", [True])]
)
def test_a_damaged_optional_field_is_dropped_not_the_marker(field, value):
    data = {**marker().to_json(), field: value}
    got = RunningMarker.from_json(data)
    assert got is not None and getattr(got, field) == getattr(RunningMarker(2, 1, 3, 8), field)


def test_not_an_object_is_no_marker():
    assert RunningMarker.from_json([1, 2]) is None
    assert markers_from_json("text") == ([], 1)


def test_the_crash_cause_is_a_field_of_the_outcome():
    message = "exit code 1; last output:\nTraceback (most recent call last):\n  x\nRuntimeError: CUDA out of memory\n"
    assert crash_cause(StopReason.CRASHED, message, 1) == "RuntimeError: CUDA out of memory"
    assert crash_cause(StopReason.CRASHED, "exit code -9; last output:\n", -9) == "killed by SIGKILL"
    assert crash_cause(StopReason.TARGET_REACHED, message, 0) is None
    out = TrialOutcome(1, 1.0, 1.0, 1.0, 1.0, False, StopReason.CRASHED, 1, message=message, cause="boom")
    again = TrialOutcome.from_json(json.loads(json.dumps(out.to_json())))
    assert again == out and again.stop_reason is StopReason.CRASHED


def test_an_outcome_from_a_newer_agent_is_read_without_its_new_fields():
    data = TrialOutcome(1, 1.0, 1.0, 1.0, 1.0, True, StopReason.TARGET_REACHED, 0).to_json() | {"new_field": 1}
    assert TrialOutcome.from_json(data).reached


def test_every_outcome_field_reaches_the_record_or_is_named_as_not():
    """A new TrialOutcome field must be classified: carried into the history record, or not (message, malformed)."""
    import dataclasses

    from zeus_run.records import TrialRecord

    outcome_fields = {f.name for f in dataclasses.fields(TrialOutcome)}
    assert set(TrialOutcome.RECORDED) | {"message", "malformed"} == outcome_fields
    assert set(TrialOutcome.RECORDED) | {"observed"} <= {f.name for f in dataclasses.fields(TrialRecord)}
    out = TrialOutcome(2, 3.0, 30.0, 100.0, 31.0, False, StopReason.COST_THRESHOLD, 0, cause=None)
    fields = out.record_fields()
    assert fields["observed"] is StopReason.COST_THRESHOLD.observed and fields["epochs"] == 2
