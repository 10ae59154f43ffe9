"""Metric sources users have: JSON lines on stdout or in a file, a file the script appends to, numbers with exponents.

Each end-to-end test runs an unmodified script (no zeus_run import, no event log) through
``zeus-run run`` without PYTHONUNBUFFERED, as cron and Slurm would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.factories import zeus_run_cli
from zeus_run.errors import SpecError
from zeus_run.spec import parse_spec
from zeus_run.trial.events import NUMBER, FileMetricTail, JsonLinesMetricReader, NumberLineReader

#: Prints one JSON object per epoch (plain print, block-buffered on a pipe); accuracy 0.3 per epoch.
JSONL_SCRIPT = """
import json, sys
for epoch in range(1, 5):
    print(f"training epoch {epoch}...")
    print(json.dumps({"epoch": epoch, "loss": 4.2e-05, "val_acc": round(0.3 * epoch, 2)}))
"""

#: Appends one line per epoch to a metrics file beside it, as many scripts log.
FILE_SCRIPT = """
import sys
with open("metrics.txt", "a") as log:
    for epoch in range(1, 5):
        print(f"epoch {epoch} done")
        log.write(f"epoch {epoch}: lr 1e-3 val_acc {0.3 * epoch:.2f}\\n")
        log.flush()
"""


def _spec(tmp_path: Path, script: str, metric: str) -> Path:
    (tmp_path / "train.py").write_text(script)
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"""
name: sources
command: ["{sys.executable}", "train.py", "--batch-size", "{{batch_size}}"]
batch_sizes: [2, 4]
default_batch_size: 2
target_metric: 0.85
max_epochs: 4
recurrences: 2
metric: {metric}
energy: {{source: estimate, watts: 50, basis: wall-time}}
run_dir: runs
"""
    )
    return spec


def _run(spec: Path) -> list[dict]:
    # in-process; the trial scripts are processes, without PYTHONUNBUFFERED (tests/conftest.py drops it)
    done = zeus_run_cli("run", spec, cwd=spec.parent, env={"PYTHONUNBUFFERED": None})
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in (spec.parent / "runs" / "history.jsonl").read_text().splitlines()]


def test_jsonl_on_stdout_runs_an_unmodified_script(tmp_path):
    records = _run(_spec(tmp_path, JSONL_SCRIPT, "{source: jsonl, key: val_acc}"))
    assert records and all(r["reached"] for r in records)
    assert records[0]["metrics"][:3] == [0.3, 0.6, 0.9] and records[0]["epochs"] == 3


def test_file_source_reads_the_last_number_of_each_appended_line(tmp_path):
    records = _run(_spec(tmp_path, FILE_SCRIPT, "{source: file, path: metrics.txt}"))
    assert records and all(r["reached"] for r in records)
    # The second trial reads only its own lines, not the first trial's left in the file.
    assert all(r["metrics"][:3] == [0.3, 0.6, 0.9] and r["epochs"] == 3 for r in records)


def test_jsonl_in_a_file_and_a_regex_over_a_file(tmp_path):
    script = FILE_SCRIPT.replace(
        'log.write(f"epoch {epoch}: lr 1e-3 val_acc {0.3 * epoch:.2f}\\n")',
        'log.write(\'{"epoch": %d, "val_acc": %.2f}\\n\' % (epoch, 0.3 * epoch))',
    )
    records = _run(_spec(tmp_path, script, "{source: jsonl, key: val_acc, path: metrics.txt}"))
    assert records[0]["metrics"][:3] == [0.3, 0.6, 0.9]
    other = tmp_path / "regex"
    other.mkdir()
    records = _run(_spec(other, FILE_SCRIPT, "{source: file, path: metrics.txt, regex: 'val_acc ([0-9.]+)'}"))
    assert records[0]["metrics"][:3] == [0.3, 0.6, 0.9]


#: Appends JSON lines to a file in the trial's own directory, as a script that logs beside its checkpoints does.
LOG_DIR_SCRIPT = """
import json, os
with open(os.path.join(os.environ["ZEUS_LOG_DIR"], "metrics.jsonl"), "a") as log:
    for epoch in range(1, 5):
        log.write(json.dumps({"epoch": epoch, "val_acc": round(0.3 * epoch, 2)}) + "\\n")
        log.flush()
"""


def test_a_metric_path_with_placeholders_is_each_trials_own_file(tmp_path):
    """``path: "{log_dir}/metrics.jsonl"`` used to pass `check`, never be read, and end in an error about
    metric.regex."""
    spec = _spec(tmp_path, LOG_DIR_SCRIPT, '{source: jsonl, key: val_acc, path: "{log_dir}/metrics.jsonl"}')
    check = zeus_run_cli("check", spec)
    assert check.returncode == 0, check.stderr
    records = _run(spec)
    assert len(records) >= 2 and all(r["reached"] for r in records)
    assert all(r["metrics"] == [0.3, 0.6, 0.9] for r in records)
    for r in records:  # each trial's file, in its own directory
        assert (tmp_path / "runs" / Path(r["log"]).parent / "metrics.jsonl").is_file()


def test_an_unknown_placeholder_in_metric_path_is_refused_naming_the_field(tmp_path):
    spec = _spec(tmp_path, LOG_DIR_SCRIPT, '{source: jsonl, key: val_acc, path: "{logdir}/metrics.jsonl"}')
    r = zeus_run_cli("check", spec)
    assert r.returncode == 2
    assert "metric.path = '{logdir}/metrics.jsonl': uses unknown placeholder {logdir}. Did you mean {log_dir}?" in (
        r.stderr
    )


def test_a_metric_file_never_written_is_named_and_the_error_names_the_fields_each_source_reads(tmp_path):
    spec = _spec(tmp_path, LOG_DIR_SCRIPT, "{source: jsonl, key: val_acc, path: elsewhere/metrics.jsonl}")
    r = zeus_run_cli("run", spec, "--no-output", env={"PYTHONUNBUFFERED": None})
    assert r.returncode == 2, r.stderr
    assert "metric.regex must match" not in r.stderr
    assert "jsonl: metric.key" in r.stderr and "file: metric.path" in r.stderr, r.stderr
    (rec,) = [json.loads(line) for line in (tmp_path / "runs" / "history.jsonl").read_text().splitlines()]
    assert f"metric.path {str(tmp_path / 'elsewhere' / 'metrics.jsonl')!r} was never written" in rec["message"]


@pytest.mark.parametrize(
    ("text", "value"), [("4.2e-05", 4.2e-05), ("-1.5", -1.5), ("+3", 3.0), (".5", 0.5), ("1E+3", 1000.0)]
)
def test_the_number_pattern_takes_signs_and_exponents(text, value):
    import re

    assert re.fullmatch(NUMBER, text)
    (ev,) = NumberLineReader().feed_line(f"step 12 loss {text}".encode())
    assert ev.metric == value


def test_line_readers_skip_what_is_not_theirs(tmp_path):
    reader = JsonLinesMetricReader("val_acc")
    assert reader.feed_line(b"plain text") == [] and reader.feed_line(b'{"loss": 1}') == []
    assert reader.feed_line(b'{"val_acc": "high"}') == [] and reader.malformed == 1
    assert NumberLineReader().feed_line(b"no digits here") == []
    path = tmp_path / "m.txt"
    tail = FileMetricTail(str(path), NumberLineReader())
    assert tail.poll() == []  # not there yet
    path.write_text("acc 0.5\nacc 0.")
    assert [e.metric for e in tail.poll()] == [0.5]
    with open(path, "a") as f:
        f.write("7\n")
    assert [e.metric for e in tail.finish()] == [0.7]


@pytest.mark.parametrize(
    ("metric", "field", "words"),
    [
        ("{source: jsonl}", "metric.key", "required"),
        ("{source: file}", "metric.path", "required"),
        ("{source: events, key: val_acc}", "metric.key", "jsonl"),
        ("{source: regex, regex: 'a=([0-9]+)', path: m.txt}", "metric.path", "source: file"),
        ("{source: jsonl, key: a, regex: 'a=([0-9]+)'}", "metric.regex", "regex"),
        ("{source: csv}", "metric.source", "csv"),
    ],
)
def test_bad_metric_sections_name_field_value_and_fix(metric, field, words):
    text = f"name: j\ncommand: [python, t.py]\nbatch_sizes: [8]\ndefault_batch_size: 8\ntarget_metric: 0.5\nmetric: {metric}\n"
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    problems = {p.field: p for p in info.value.problems}
    assert field in problems, info.value
    assert words in str(info.value)


def test_a_bad_metric_section_exits_2_without_a_traceback(tmp_path):
    spec = _spec(tmp_path, JSONL_SCRIPT, "{source: jsonl}")
    done = zeus_run_cli("run", spec, cwd=tmp_path)
    assert done.returncode == 2 and "metric.key" in done.stderr and "Traceback" not in done.stderr
