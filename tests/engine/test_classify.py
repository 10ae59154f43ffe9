"""What a trial was, on its evidence (`zeus_run.engine.classify`): one table, and the run it stops."""

from __future__ import annotations

import dataclasses

import pytest

from tests.cli.test_run_cli import FAKE, history, spec_text, zeus
from tests.conftest import PYTHON
from tests.factories import make_record
from zeus_run.engine.classify import Verdict, classify, judge
from zeus_run.engine.core import Ledger
from zeus_run.engine.replay import Knobs, audit
from zeus_run.records import TrialRecord
from zeus_run.rundir.history import read_history

BASE = make_record(
    job="t",
    recurrence=1,
    attempt=1,
    trial=0,
    batch_size=2,
    stage="pruning",
    epochs=0,
    time=2.0,
    energy=200.0,
    max_power=100.0,
    cost=200.0,
    reached=False,
    stop_reason="exited",
    exit_code=0,
)
CONVERGED = dataclasses.replace(
    BASE, epochs=4, time=4.0, reached=True, stop_reason="target_reached", metrics=(0.5, 0.6, 0.7, 0.95)
)
CUT_LATE = dataclasses.replace(BASE, stop_reason="cost_threshold", exit_code=0, after_metrics=(0.4,))

TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n    {line}\n{error}'
IMPORT = TRACEBACK.format(line="import torchvision", error="ModuleNotFoundError: No module named 'torchvision'")
OOM = TRACEBACK.format(
    line="loss.backward()", error="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
)
ARGPARSE = "usage: train.py [-h] [--batch-size B]\ntrain.py: error: unrecognized arguments: --epochs 5"
HF_METRIC = TRACEBACK.format(
    line="self.driver.evaluated(metrics)",
    error="zeus_run.integrations._driver.MetricNotFound: the evaluation logged no metric 'eval_f1' "
    "(it logged: eval_accuracy, eval_loss). Set metric.name in the job spec to one of these",
)
NO_MATCH = (
    "metric.regex 'val_accuracy=([0-9.]+)' matched none of the script's {n} output line(s); its last lines:\n"
    "  | epoch 1 val_acc=0.5; the script exited after 0 epoch(s) without reaching the target"
)
NO_LINE_IN_FILE = "metric.path '/tmp/m.txt': none of the 3 line(s) appended to it held a metric"

ROWS = [
    # (tail, exit code, stop reason, metrics, history) -> verdict
    (None, 0, "target_reached", (0.5, 0.95), [], Verdict.REACHED),
    (None, -15, "cost_threshold", (0.5,), [CONVERGED], Verdict.EARLY_STOPPED),
    (None, 0, "max_epochs", (0.1, 0.2), [], Verdict.NOT_REACHED),
    # crashes of the batch size: out of memory (CUDA, CPU, the OOM killer), a NaN, any other exit
    (OOM, 1, "crashed", (), [], Verdict.CRASHED),
    ("RuntimeError: CUDA out of memory", 1, "crashed", (), [], Verdict.CRASHED),
    (TRACEBACK.format(line="x = [0] * n", error="MemoryError"), 1, "crashed", (), [], Verdict.CRASHED),
    ("", -9, "crashed", (), [], Verdict.CRASHED),
    ("ValueError: loss is NaN", 1, "crashed", (0.3,), [], Verdict.CRASHED),
    ("No module named 'apex', using native AMP\n" + OOM, 1, "crashed", (), [], Verdict.CRASHED),  # the last error
    (
        IMPORT + "\nDuring handling of the above exception, another exception occurred:\n" + OOM,
        1,
        "crashed",
        (),
        [],
        Verdict.CRASHED,
    ),
    ("sh: 1: nvidia-smi: not found\n" + OOM, 127, "crashed", (), [], Verdict.CRASHED),
    ("RuntimeError: boom", 1, "crashed", (), [], Verdict.CRASHED),
    (None, 1, "crashed", (), [], Verdict.CRASHED),  # a bare tell: only the exit code
    # the environment: the script could not start
    (IMPORT, 1, "crashed", (), [], Verdict.ENVIRONMENT_ERROR),
    (IMPORT, 1, "crashed", (), [CONVERGED], Verdict.ENVIRONMENT_ERROR),  # whatever came before
    ("ImportError: libcudart.so.12: cannot open shared object file", 1, "crashed", (), [], Verdict.ENVIRONMENT_ERROR),
    (
        TRACEBACK.format(line="def f(:", error="SyntaxError: invalid syntax"),
        1,
        "crashed",
        (),
        [],
        Verdict.ENVIRONMENT_ERROR,
    ),
    ("/usr/bin/python3: No module named trainer", 1, "crashed", (), [], Verdict.ENVIRONMENT_ERROR),
    (
        "python3: can't open file '/work/train.py': [Errno 2] No such file or directory",
        2,
        "crashed",
        (),
        [],
        Verdict.ENVIRONMENT_ERROR,
    ),
    ("sh: 1: python3.99: not found", 127, "crashed", (), [], Verdict.ENVIRONMENT_ERROR),
    ("bash: line 1: torchrun: command not found", 127, "crashed", (), [], Verdict.ENVIRONMENT_ERROR),
    ("/usr/bin/env: 'python9': No such file or directory", 127, "crashed", (), [], Verdict.ENVIRONMENT_ERROR),
    # the spec: no metric was ever readable, or the script rejected its arguments
    (None, 0, "exited", (), [], Verdict.SPEC_ERROR),  # exited 0, no reading, none ever
    (None, 0, "exited", (), [CONVERGED], Verdict.NOT_REACHED),  # the metric worked before: not the spec
    (None, 0, "exited", (), [CUT_LATE], Verdict.NOT_REACHED),  # read after a stop: it works
    # lines came, none held the metric, where earlier trials' did: the metric section (or the output) changed
    (NO_MATCH.format(n=20), 0, "exited", (), [CONVERGED], Verdict.SPEC_ERROR),
    (NO_MATCH.format(n=20), 0, "exited", (), [], Verdict.SPEC_ERROR),
    (NO_MATCH.format(n=0), 0, "exited", (), [CONVERGED], Verdict.NOT_REACHED),  # no line came: nothing to judge
    (NO_LINE_IN_FILE, 0, "exited", (), [CONVERGED], Verdict.SPEC_ERROR),
    (NO_MATCH.format(n=20), 0, "max_epochs", (0.1, 0.2), [CONVERGED], Verdict.NOT_REACHED),
    (ARGPARSE, 2, "crashed", (), [], Verdict.SPEC_ERROR),
    (ARGPARSE, 2, "crashed", (), [CONVERGED], Verdict.SPEC_ERROR),  # on evidence, not only the first trial
    (None, 2, "crashed", (), [], Verdict.SPEC_ERROR),  # no output to read: exit 2 on the first trial
    (None, 2, "crashed", (), [CONVERGED], Verdict.CRASHED),
    ("RuntimeError: bad shape", 2, "crashed", (), [], Verdict.CRASHED),  # exit 2, but not argparse
    (HF_METRIC, 1, "crashed", (), [], Verdict.SPEC_ERROR),
    ("MetricNotFound: the evaluation logged no metric 'f1'", 1, "crashed", (), [], Verdict.SPEC_ERROR),  # Job API
    # cut by the launcher: never a spec error from its timing, however long it ran without a metric
    (None, -15, "cost_threshold", (), [CONVERGED], Verdict.EARLY_STOPPED),
    (None, -15, "timeout", (), [], Verdict.NOT_REACHED),
    (None, -15, "timeout", (), [CONVERGED], Verdict.NOT_REACHED),
    (None, -15, "interrupted", (), [], Verdict.NOT_JUDGED),
]


@pytest.mark.parametrize(("tail", "exit_code", "reason", "metrics", "before", "verdict"), ROWS)
def test_classification_table(tail, exit_code, reason, metrics, before, verdict):
    record = dataclasses.replace(
        BASE,
        stop_reason=reason,
        exit_code=exit_code,
        metrics=metrics,
        epochs=len(metrics),
        reached=reason == "target_reached",
        time=30.0,  # many times an epoch of CONVERGED: timing is no evidence
    )
    assert classify(record, before, tail).verdict is verdict


def test_the_tail_defaults_to_the_records_message():
    record = dataclasses.replace(
        BASE, stop_reason="crashed", exit_code=1, message=f"exit code 1; last output:\n{IMPORT}"
    )
    assert classify(record).verdict is Verdict.ENVIRONMENT_ERROR


def test_an_environment_error_is_not_observed_and_names_the_cause_and_the_fix():
    record = dataclasses.replace(
        BASE, stop_reason="crashed", exit_code=1, message=f"exit code 1; last output:\n{IMPORT}"
    )
    kept, error = judge(record, [])
    assert kept.stop_reason == "environment_error" and kept.observed is False
    assert kept.cause == "ModuleNotFoundError: No module named 'torchvision'"
    assert error is not None and error.exit_code == 2
    text = str(error)
    assert "No module named 'torchvision'" in text and "the environment, not the batch size" in text
    assert "pip install torchvision" in text and "the run resumes" in text


def test_a_crash_of_the_batch_size_stays_an_observation():
    record = dataclasses.replace(BASE, stop_reason="crashed", exit_code=1, message=f"exit code 1; last output:\n{OOM}")
    assert judge(record, []) == (record, None)


def test_a_spec_error_names_the_field_to_fix():
    kept, error = judge(BASE, [])
    assert kept.stop_reason == "config_error" and not kept.observed
    assert error is not None and "Fix `metric`" in str(error) and "failed because of the job spec" in str(error)


# -- end to end, through `zeus-run run` ----------------------------------------------------------


def test_a_missing_module_stops_with_exit_2_and_a_fixed_environment_resumes_without_force(write_spec, tmp_path):
    plugin = tmp_path / "plugins"
    plugin.mkdir()
    script = tmp_path / "train.py"
    script.write_text(
        f"import zeus_extra_plugin  # noqa\nimport runpy, sys\nsys.argv[0] = {FAKE!r}\nrunpy.run_path({FAKE!r}, run_name='__main__')\n"
    )
    body = "recurrences: 2\n" + f"env: {{PYTHONPATH: '{plugin}'}}\n"
    spec = write_spec(spec_text("", body).replace("recurrences: 1\n", "").replace(FAKE, str(script)))
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 2, r.stderr
    assert "No module named 'zeus_extra_plugin'" in r.stderr and "the environment, not the batch size" in r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    (bad,) = history(spec)
    assert bad["stop_reason"] == "environment_error" and bad["observed"] is False and bad["batch_size"] == 2
    # Install the module: the same command resumes (no --force), re-runs that try, and the run completes.
    (plugin / "zeus_extra_plugin.py").write_text("")
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    recs = history(spec)
    assert recs[0] == bad and (recs[1]["recurrence"], recs[1]["attempt"]) == (1, 2) and recs[1]["reached"]
    assert (recs[1]["batch_size"], recs[1]["detail"]) == (2, "default batch size first")
    assert {x["recurrence"] for x in recs if x["reached"]} == {1, 2}
    records = read_history(spec.parent / "runs")
    assert audit(records, Knobs.from_run_dir(spec.parent / "runs")).divergence is None


def test_a_crash_at_once_is_the_batch_sizes_failure(write_spec):
    spec = write_spec(spec_text("--crash-at 1 --crash-bs 2"))
    r = zeus("run", str(spec), "--no-output")
    (rec,) = history(spec)
    assert rec["stop_reason"] == "crashed" and rec["observed"] is True and rec["batch_size"] == 2
    assert rec["exit_code"] == 3 and "boom at epoch 1" in rec["message"]
    # An observed failure of the default batch size: the run fails as such, not as a spec error.
    assert r.returncode == 1 and "did not reach the target (crashed" in r.stderr, r.stderr
    assert "job spec, not the batch size" not in r.stderr and "environment" not in r.stderr


def test_a_wrong_regex_stops_with_exit_2_and_a_fixed_spec_resumes_without_force(write_spec):
    body = "recurrences: 3\nmetric: {regex: 'val_loss=([0-9.]+)'}\n"
    spec = write_spec(spec_text("--mode print", body).replace("recurrences: 1\n", ""))
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 2, r.stderr
    assert "failed because of the job spec, not the batch size" in r.stderr and "metric.regex" in r.stderr
    (bad,) = history(spec)
    assert bad["stop_reason"] == "config_error" and bad["observed"] is False and bad["batch_size"] == 2
    # Fix the regex: the same command resumes the run (no --force) and re-runs that try.
    spec.write_text(spec.read_text().replace("val_loss=", "val_acc="))
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    recs = history(spec)
    assert recs[0] == bad and recs[1]["recurrence"] == 1 and recs[1]["attempt"] == 2 and recs[1]["reached"]
    assert {x["recurrence"] for x in recs if x["reached"]} == {1, 2, 3}
    # The record steered nothing: the retry is a fresh run's first decision, the optimizer
    # folded only the observed tries, and every decision re-derives from them.
    assert (recs[1]["batch_size"], recs[1]["stage"], recs[1]["detail"]) == (2, "pruning", "default batch size first")
    records = read_history(spec.parent / "runs")
    knobs = Knobs.from_run_dir(spec.parent / "runs")
    ledger = Ledger.from_history(knobs.engine(4), records)
    assert ledger.observed == len(records) - 1 == ledger.state.step
    assert audit(records, knobs).divergence is None


def test_a_regex_typo_on_the_second_night_is_a_spec_error_never_an_observation(write_spec):
    body = "recurrences: 3\nmax_tries: 2\nmetric: {regex: 'val_acc=([0-9.]+)'}\n"
    spec = write_spec(spec_text("--mode print", body).replace("recurrences: 1\n", ""))
    r = zeus("run", str(spec), "--no-output", "--next")
    assert r.returncode == 0, r.stderr
    (night1,) = history(spec)
    assert night1["reached"] is True
    spec.write_text(spec.read_text().replace("val_acc=", "val_accuracy="))  # the typo, on night 2
    r = zeus("run", str(spec), "--no-output", "--next")
    assert r.returncode == 2, r.stderr
    assert "metric.regex 'val_accuracy=([0-9.]+)' matched none of the script's" in r.stderr, r.stderr
    recs = history(spec)
    assert [x["stop_reason"] for x in recs] == ["target_reached", "config_error"]
    assert not any(x["observed"] for x in recs[1:]) and recs[1].get("recurrence_failed") is None
    # The run directory's spec.yaml is the spec in force; the one before is kept beside it.
    stored = (spec.parent / "runs" / "spec.yaml").read_text()
    assert "val_accuracy=" in stored and "val_acc=" in (spec.parent / "runs" / "spec.1.yaml").read_text()
    # Fixed the same night: night 2's script had reached its target (it exited 0), so its model is kept (taken
    # over from its output, not run again); the job's cadence is not known yet (one gap), so a trigger within half
    # a day of the typo night is that night's again and runs no other recurrence.
    spec.write_text(spec.read_text().replace("val_accuracy=", "val_acc="))
    r = zeus("run", str(spec), "--no-output", "--next")
    assert r.returncode == 0, r.stderr
    recs = history(spec)
    assert [(x["recurrence"], x["stop_reason"]) for x in recs] == [
        (1, "target_reached"),
        (2, "config_error"),
        (2, "target_reached"),
    ]
    assert "taken over from the output of try 1" in recs[-1]["message"]
    assert "runs no other" in r.stderr, r.stderr


def test_a_placeholder_the_script_rejects_is_a_configuration_error(write_spec):
    spec = write_spec(spec_text("--epochs {epochs}"))  # fake_train.py has no --epochs: argparse exits 2
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 2, r.stderr
    assert "the script rejected its arguments" in r.stderr and "--epochs" in r.stderr
    (rec,) = history(spec)
    assert rec["stop_reason"] == "config_error" and rec["observed"] is False and rec["exit_code"] == 2


def test_a_missing_interpreter_under_a_shell_is_an_environment_error(write_spec):
    text = spec_text()
    start = text.index("command:")
    end = text.index("\n", start)
    spec = write_spec(text[:start] + 'shell: true\ncommand: "python3.99-missing train.py {batch_size}"' + text[end:])
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 2, r.stderr
    assert "python3.99-missing" in r.stderr and "the environment, not the batch size" in r.stderr
    (rec,) = history(spec)
    assert rec["stop_reason"] == "environment_error" and "python3.99-missing" in rec["cause"]


def test_a_callbacks_wrong_metric_name_is_a_spec_error(write_spec, tmp_path):
    # What the Hugging Face and Lightning callbacks do at each evaluation, without either framework.
    script = tmp_path / "train.py"
    script.write_text(
        "from zeus_run.integrations._driver import Driver\n"
        "driver = Driver(metric='eval_f1', prefix='eval_')\n"
        "driver.evaluated({'eval_accuracy': 0.5, 'eval_loss': 0.3})\n"
    )
    text = spec_text()
    start = text.index("command:")
    spec = write_spec(text[:start] + f'command: ["{PYTHON}", "{script}"]' + text[text.index("\n", start) :])
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 2, r.stderr
    assert "metric.name" in r.stderr and "eval_f1" in r.stderr and "not the batch size" in r.stderr
    (rec,) = history(spec)
    assert rec["stop_reason"] == "config_error" and rec["observed"] is False


def test_the_new_fields_round_trip_and_old_records_read_as_before():
    new = dataclasses.replace(
        CUT_LATE, stop_reason="environment_error", observed=False, after_metrics=(0.4, float("nan"))
    )
    data = new.to_json()
    assert data["stop_reason"] == "environment_error" and data["after_metrics"] == [0.4, None]
    back = TrialRecord.from_json(data)
    assert back.stop_reason == "environment_error" and back.after_metrics[0] == 0.4
    old = BASE.to_json()
    assert "after_metrics" not in old  # written only when set: older readers see the same line
    assert TrialRecord.from_json(old) == BASE


def test_a_trial_reading_no_metric_after_the_metric_section_changed_is_a_spec_error():
    silent = dataclasses.replace(BASE, message="the script exited after 0 epoch(s) without reaching the target")
    assert classify(silent, [CONVERGED]).verdict is Verdict.NOT_REACHED  # no change, no line: the batch size's
    found = classify(silent, [CONVERGED], changed="metric.source, metric.path")
    assert found.verdict is Verdict.SPEC_ERROR and "metric.source, metric.path changed" in (found.cause or "")
    assert "`metric.source`" in (found.fix or "")
    read = dataclasses.replace(silent, metrics=(0.3,), epochs=1)
    assert classify(read, [CONVERGED], changed="metric.regex").verdict is Verdict.NOT_REACHED  # it reads: fine
    assert classify(silent, [], changed="metric.regex").verdict is Verdict.SPEC_ERROR  # as ever, on a first trial


def test_a_typo_cut_by_the_cost_threshold_is_a_spec_error_never_an_observation():
    """Issue 53, item 6: the night after `metric.regex` was edited to a typo, the first try is cut by the cost
    threshold with no metric read, though its script wrote lines. It is the spec's (config_error, not observed),
    as the same typo is when the script runs to its end; without the doubt on the metric it stays a cut."""
    cut = dataclasses.replace(BASE, stop_reason="cost_threshold", exit_code=-15, message=NO_MATCH.format(n=20))
    found = classify(cut, [CONVERGED], changed="metric.regex")
    assert (found.verdict, found.stop_reason) == (Verdict.SPEC_ERROR, "config_error")
    assert "cost_threshold cut it" in (found.cause or "") and "`metric.regex`" in (found.fix or "")
    record, error = judge(cut, [CONVERGED], changed="metric.regex")
    assert record.stop_reason == "config_error" and record.observed is False and error is not None
    timed_out = dataclasses.replace(cut, stop_reason="timeout")
    assert classify(timed_out, [CONVERGED], changed="metric.regex").verdict is Verdict.SPEC_ERROR
    # The typo left in place on a later night (nothing changed since the spec error it caused): still the spec's.
    typo = dataclasses.replace(
        BASE, stop_reason="config_error", observed=False, cause=NO_MATCH.format(n=20).split(";")[0]
    )
    assert classify(cut, [CONVERGED, typo]).verdict is Verdict.SPEC_ERROR
    # No doubt on the metric, no line written, or no metric ever read: the cut's timing is no evidence.
    assert classify(cut, [CONVERGED]).verdict is Verdict.EARLY_STOPPED
    assert classify(cut, [CONVERGED, typo, CONVERGED]).verdict is Verdict.EARLY_STOPPED  # read since the error
    silent = dataclasses.replace(cut, message=NO_MATCH.format(n=0))
    assert classify(silent, [CONVERGED], changed="metric.regex").verdict is Verdict.EARLY_STOPPED
    assert classify(cut, [], changed="metric.regex").verdict is Verdict.EARLY_STOPPED
    read = dataclasses.replace(cut, metrics=(0.3,), epochs=1)
    assert classify(read, [CONVERGED], changed="metric.regex").verdict is Verdict.EARLY_STOPPED


def test_a_typo_nights_model_is_kept_once_the_spec_is_fixed_and_the_calendar_catches_up(write_spec):
    """Issue 53, item 4: on the typo night the script trained to the target and saved its model, but its metric
    could not be read (config_error, exit 2). Fixed, the next trigger reads that try's output again: the
    recurrence is recorded reached from it (its whole process, as measured), not run again, and the same
    `--next` trigger goes on to tonight's recurrence, so the job is no night behind its calendar."""
    body = "recurrences: 7\nmax_tries: 2\nmetric: {regex: 'val_acc=([0-9.]+)'}\n"
    spec = write_spec(spec_text("--mode print", body).replace("recurrences: 1\n", ""))
    # Nights 1-4 triggered back to back: the history's cadence (three gaps) is one night's run, so a trigger one
    # night's run after the typo night's start is the next night's.
    for _ in range(4):
        assert zeus("run", str(spec), "--no-output", "--next").returncode == 0
    spec.write_text(spec.read_text().replace("val_acc=", "val_accuracy="))  # the typo, on night 5
    assert zeus("run", str(spec), "--no-output", "--next").returncode == 2
    typo = history(spec)[-1]
    assert (typo["recurrence"], typo["stop_reason"], typo["exit_code"]) == (5, "config_error", 0)
    spec.write_text(spec.read_text().replace("val_accuracy=", "val_acc="))  # fixed before night 6
    r = zeus("run", str(spec), "--no-output", "--next")
    assert r.returncode == 0, r.stderr
    recs = history(spec)
    assert [(x["recurrence"], x["attempt"], x["stop_reason"]) for x in recs[4:]] == [
        (5, 1, "config_error"),
        (5, 2, "target_reached"),  # the typo night's model, kept: not run again
        (6, 1, "target_reached"),  # tonight's: the calendar caught up
    ]
    kept = recs[5]
    assert kept["observed"] is True and kept["reached"] is True and kept["batch_size"] == typo["batch_size"]
    assert kept["metrics"] and kept["metrics"][-1] >= 0.9 and "taken over from the output of try 1" in kept["message"]
    assert (kept["time"], kept["energy"], kept["started_at"]) == (typo["time"], typo["energy"], typo["started_at"])
    audit = zeus("replay", str(spec.parent / "runs"))
    assert audit.returncode == 0, audit.stdout + audit.stderr
