"""A crash out of memory is retried at a smaller batch size, on any night (the first included), and a batch size
that ran out of memory where a smaller one then fitted is never decided again; old histories replay as they were.

Real CLI processes without PYTHONUNBUFFERED; the script (`tests/scripts/oom_train.py`) raises PyTorch's
``CUDA out of memory`` above a batch size.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_run_cli import zeus
from tests.conftest import PYTHON, SCRIPTS
from tests.engine.doors import audit_exact, history


def oom_job(
    tmp_path: Path, oom_above: int, recurrences: int = 4, sizes: str = "[4, 8, 16, 32, 64]", b0: int = 32
) -> Path:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"""
name: oom
command: ["{PYTHON}", "{SCRIPTS / "oom_train.py"}", "--batch-size", "{{batch_size}}", "--oom-above", "{oom_above}"]
batch_sizes: {sizes}
default_batch_size: {b0}
target_metric: 0.9
max_epochs: 5
beta: null
recurrences: {recurrences}
max_tries: 3
energy: {{source: estimate, watts: 100, basis: wall-time}}
run_dir: runs
"""
    )
    return spec


def test_a_default_that_runs_out_of_memory_on_night_one_ends_the_night_with_a_smaller_one(tmp_path):
    spec = oom_job(tmp_path, oom_above=16)
    r = zeus("run", str(spec), "--next", "--no-output")
    assert r.returncode == 0, r.stderr
    first, retry = history(spec)
    assert (first["batch_size"], first["stop_reason"], first["oom"]) == (32, "crashed", True)
    assert first["observed"] is True  # the batch size's failure, taught as such
    assert retry["recurrence"] == 1 and retry["attempt"] == 2 and retry["batch_size"] == 16 and retry["reached"]
    assert "ran out of memory" in retry["detail"]
    # The job learnt: 32 and above never run again, whatever the optimizer would explore.
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    recs = history(spec)
    assert {x["recurrence"] for x in recs if x["reached"]} == {1, 2, 3, 4}
    assert all(x["batch_size"] < 32 for x in recs[1:]), [x["batch_size"] for x in recs]
    audit_exact(spec)  # every decision re-derives from the records


def test_a_night_whose_every_try_runs_out_of_memory_goes_smaller_each_try(tmp_path):
    spec = oom_job(tmp_path, oom_above=2)  # nothing fits
    r = zeus("run", str(spec), "--next", "--no-output")
    assert r.returncode != 0
    assert [x["batch_size"] for x in history(spec)] == [32, 16, 8]
    assert "Traceback" not in r.stderr
    audit_exact(spec)


def test_when_the_smallest_runs_out_of_memory_no_retry_goes_larger(tmp_path):
    spec = oom_job(tmp_path, oom_above=2, sizes="[4, 8, 16]", b0=8)  # nothing fits
    r = zeus("run", str(spec), "--next", "--no-output")
    assert r.returncode != 0
    # 8 runs out of memory, then 4, the smallest: the last try runs 4 again, never 8 or 16 (they need more).
    assert [x["batch_size"] for x in history(spec)] == [8, 4, 4]
    assert "Traceback" not in r.stderr
    audit_exact(spec)


def test_the_mark_alone_steers_the_retry_so_an_unmarked_old_history_keeps_its_decisions(tmp_path):
    spec = oom_job(tmp_path, oom_above=16, recurrences=2)
    assert zeus("run", str(spec), "--no-output").returncode == 0
    path = tmp_path / "runs" / "history.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    # As an older zeus-run wrote it: no mark on the crash, so nothing steers the decisions after it.
    for rec in recs:
        rec.pop("oom", None)
    unmarked = tmp_path / "old" / "runs"
    unmarked.mkdir(parents=True)
    (unmarked / "spec.yaml").write_text((tmp_path / "runs" / "spec.yaml").read_text())
    (unmarked / "history.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    out = json.loads(zeus("replay", str(unmarked), "--format", "json").stdout)
    # The recorded retry (16) is not what the unmarked history decides: the mark alone steers it.
    assert out["divergence"] is not None and out["divergence"]["trial"] == 1, out
