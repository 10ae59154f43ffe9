"""Property tests: no input we can name reaches "internal error".

Random bytes, random JSON and spec-shaped documents go to the three readers of
untrusted input: the event reader (and the regex metric reader), the history
reader and the spec loader. Every input must give a clean outcome, a result or
a `ZeusRunError`, within a time bound (a watchdog, not a speed target: it is
there to catch hangs such as the old billion-laughs case).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.rundir.test_history import rec
from zeus_run.errors import ZeusRunError
from zeus_run.rundir.history import parse_history
from zeus_run.spec import JobSpec, load_spec, parse_spec
from zeus_run.trial.events import EventLogTail, RegexMetricReader

#: Seconds one example may take before it counts as a hang.
HANG = 30

#: Examples per property; ZEUS_FUZZ_EXAMPLES=5000 for a longer campaign.
EXAMPLES = int(os.environ.get("ZEUS_FUZZ_EXAMPLES", "150"))

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@contextlib.contextmanager
def watchdog(seconds: int = HANG) -> Iterator[None]:
    def hung(_signum: int, _frame: object) -> None:
        raise AssertionError(f"no outcome within {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats()
    | st.text(max_size=30)
    | st.sampled_from(["nan", "inf", "1e999", "-0", "0x10", "010", "1e-3", "{", "{batch_size}", "}}"])
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
deep = st.integers(min_value=1, max_value=100_000).map(lambda d: "[" * d + "]" * (d % 3))


def json_text(value: object) -> str:
    return json.dumps(value)  # NaN and Infinity as Python writes them


events = st.fixed_dictionaries(
    {"event": st.sampled_from(["epoch", "step", "info", "other"]) | json_values},
    optional={
        "metric": json_values,
        "epoch": json_values,
        "n": json_values,
        "time": json_values,
        "iters_per_epoch": json_values,
    },
)
event_lines = st.lists(
    st.binary(max_size=100)
    | json_values.map(json_text).map(str.encode)
    | events.map(json_text).map(str.encode)
    | deep.map(str.encode),
    max_size=12,
)


@FUZZ
@given(lines=event_lines)
@example(
    lines=[
        b'{"event": "epoch", "metric": NaN, "epoch": 1e999}',
        b"[" * 60000,
        b'{"event": "step", "n": ' + b"9" * 400 + b"}",
    ]
)
def test_event_reader_never_fails(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("ev") / "events.jsonl"
    raw = b"\n".join(lines)
    path.write_bytes(raw)
    tail = EventLogTail(str(path))
    with watchdog():
        out = tail.finish()
    assert all(isinstance(e.epoch, int) and 0 <= e.epoch < 2**63 and isinstance(e.metric, float) for e in out)
    assert all(math.isfinite(e.metric) or math.isnan(e.metric) for e in out)
    assert len(out) + tail.malformed <= raw.count(b"\n") + 1
    assert tail.steps >= 0 and (tail.step_time is None or math.isfinite(tail.step_time))


@FUZZ
@given(lines=st.lists(st.binary(max_size=200) | st.text(max_size=200).map(str.encode), max_size=8))
def test_regex_reader_never_fails(lines):
    reader = RegexMetricReader(r"val_acc=(\S+)|loss[:=]\s*([^\s,]*)")
    with watchdog():
        out = [e for line in lines for e in reader.feed_line(line)]
    assert all(isinstance(e.metric, float) for e in out)


def record_lines() -> st.SearchStrategy[bytes]:
    good = rec(0).to_json()
    mutated = st.builds(lambda key, value: {**good, key: value}, st.sampled_from(sorted(good)), json_values)
    return (
        (mutated | json_values | st.just(good)).map(json_text).map(str.encode)
        | st.binary(max_size=120)
        | deep.map(str.encode)
    )


@FUZZ
@given(lines=st.lists(record_lines(), max_size=8), newline_at_end=st.booleans())
@example(lines=[b"[1,2]", json.dumps(rec(0).to_json()).encode()], newline_at_end=True)
@example(lines=[json.dumps({**rec(0).to_json(), "recurrence": "1"}).encode()], newline_at_end=True)
def test_history_reader_never_fails(lines, newline_at_end):
    raw = b"\n".join(lines) + (b"\n" if newline_at_end else b"")
    with watchdog():
        try:
            records = parse_history(raw)
        except ZeusRunError as exc:
            assert exc.exit_code == 2 and "line" in str(exc)
            return
    for r in records:  # what was accepted can be written back as strict JSON
        json.dumps(r.to_json(), allow_nan=False)


GOOD = {
    "name": "job",
    "command": ["python", "train.py", "--bs", "{batch_size}"],
    "batch_sizes": [32, 64, 128],
    "default_batch_size": 64,
    "target_metric": 0.9,
}
KEYS = [
    *GOOD,
    "shell",
    "workdir",
    "env",
    "learning_rate",
    "lr_scaling",
    "higher_is_better",
    "max_epochs",
    "eta",
    "beta",
    "recurrences",
    "max_tries",
    "seed",
    "timeout",
    "run_dir",
    "optimizer",
    "metric",
    "energy",
    "power_limit",
]
SECTION_KEYS = [
    "policy",
    "window_size",
    "pruning_rounds",
    "prior_mean",
    "prior_precision",
    "num_explorations",
    "source",
    "regex",
    "watts",
    "gpus",
    "enabled",
    "step_watts",
    "on_no_permission",
    "min",
    "max",
    "step",
]
spec_values = json_values | st.dictionaries(st.sampled_from(SECTION_KEYS), json_values, max_size=4)
spec_docs = st.builds(
    lambda changes: {**GOOD, **changes}, st.dictionaries(st.sampled_from(KEYS), spec_values, max_size=4)
)


def clean(outcome: object) -> None:
    assert isinstance(outcome, JobSpec)
    json.dumps(outcome.to_dict(), allow_nan=False)  # a valid spec can be saved in the run directory


def parse(text: str) -> None:
    with watchdog():
        try:
            outcome = parse_spec(text)
        except ZeusRunError as exc:
            assert exc.exit_code == 2
            return
    clean(outcome)


@FUZZ
@given(doc=spec_docs, flow=st.booleans())
def test_spec_loader_never_fails_on_spec_shaped_documents(doc, flow):
    try:
        text = yaml.safe_dump(doc, default_flow_style=flow, allow_unicode=True)
    except (yaml.YAMLError, ValueError, OverflowError):
        return
    parse(text)


@FUZZ
@given(text=st.text(max_size=300))
@example(text="a: &a [*a, *a]\nb: *a\n")
@example(text='run_dir: "a\\0b"\n')
def test_spec_loader_never_fails_on_random_text(text):
    parse(text)


@FUZZ
@given(
    lines=st.lists(
        st.sampled_from(yaml.safe_dump(GOOD, default_flow_style=False).splitlines()) | st.text(max_size=40), max_size=12
    )
)
def test_spec_loader_never_fails_on_recombined_lines(lines):
    parse("\n".join(lines) + "\n")


@FUZZ
@given(raw=st.binary(max_size=300))
def test_spec_file_of_random_bytes(tmp_path_factory, raw):
    path: Path = tmp_path_factory.mktemp("spec") / "job.yaml"
    path.write_bytes(raw)
    with watchdog():
        try:
            clean(load_spec(path))
        except ZeusRunError as exc:
            assert exc.exit_code == 2


@pytest.mark.parametrize("depth", [1_000, 60_000])
def test_deep_documents_in_every_reader(tmp_path, depth):
    text = "[" * depth + "]" * depth
    parse(f"name: x\nvalue: {text}\n")
    with watchdog(), pytest.raises(ZeusRunError, match="line 1"):
        parse_history((text + "\n").encode() + json.dumps(rec(0).to_json()).encode() + b"\n")
