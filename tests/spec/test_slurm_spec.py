"""The ``executor`` and ``concurrency`` settings of a job spec."""

from __future__ import annotations

import pytest

from zeus_run.errors import SpecError
from zeus_run.executors._slurm import slurm_settings
from zeus_run.rundir.resume import spec_differences
from zeus_run.slurm import RESERVED_SBATCH_OPTIONS, BatchJob, SlurmSettings, sbatch_command
from zeus_run.spec import ExecutorSettings, parse_spec

BASE = """
name: x
command: [python, t.py]
batch_sizes: [8, 16]
default_batch_size: 8
target_metric: 0.5
"""


def problems(extra: str) -> list[str]:
    with pytest.raises(SpecError) as err:
        parse_spec(BASE + extra)
    return [p.render() for p in err.value.problems]


def test_default_executor_is_local_and_serial():
    spec = parse_spec(BASE)
    assert spec.executor == ExecutorSettings() and spec.executor.kind == "local"
    assert spec.concurrency == 1
    assert spec.to_dict()["executor"]["kind"] == "local"


def test_slurm_executor_settings_reach_sbatch(tmp_path):
    spec = parse_spec(
        BASE
        + """
concurrency: 2
executor:
  kind: slurm
  partition: gpu
  gpus: 2
  time: "01:30:00"
  account: ml
  qos: high
  extra_args: ["--mem=8G", "--constraint=a100"]
  heartbeat_timeout: 60
  infra_retries: 5
"""
    )
    assert spec.concurrency == 2
    settings = slurm_settings(spec.executor)
    assert settings == SlurmSettings("gpu", 2, "01:30:00", "ml", "high", ("--mem=8G", "--constraint=a100"), 60.0, 5)
    argv = sbatch_command(BatchJob("j", "", tmp_path / "o.log", tmp_path), settings)
    for arg in ("--partition=gpu", "--gres=gpu:2", "--time=01:30:00", "--account=ml", "--qos=high", "--mem=8G"):
        assert arg in argv
    assert spec.to_dict()["executor"]["extra_args"] == ["--mem=8G", "--constraint=a100"]


def test_an_unquoted_slurm_time_is_read_as_the_text_written():
    # The spec loader reads YAML 1.2: 02:00:00 is a string there (YAML 1.1 made it 7200).
    assert parse_spec(BASE + "executor: {kind: slurm, time: 02:00:00}\n").executor.time == "02:00:00"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("executor: {kind: slurm, time: 90}", "executor.time = 90: must be a Slurm time string"),
        ("executor: {kind: slurm, time: 90}", 'Quote it: time: "90"'),
        ("executor: {kind: slurm, time: 1.5}", "Quote it"),
        ("executor: {kind: slurm, time: '2h'}", "is not a Slurm time"),
        ("executor: {kind: slurm, time: '0'}", "0 means no limit"),
        (
            "executor: {kind: slurm, extra_args: [--time=5]}",
            "sets --time, which zeus-run sets itself. Set executor.time",
        ),
        ("executor: {kind: slurm, extra_args: [-pgpu]}", "Set executor.partition instead"),
        ("executor: {kind: slurm, extra_args: [--gres=gpu:2]}", "Set executor.gpus instead"),
        ("executor: {kind: slurm, extra_args: [--output=x.log]}", "Remove it: zeus-run sets it for every trial"),
        ("executor: {kind: slurm, extra_args: [--open-mode=truncate]}", "sets --open-mode"),
        ("executor: {kind: slurm, extra_args: --mem=8G}", "must be a list of sbatch options"),
        ("executor: {kind: slurm, gpus: -1}", "executor.gpus = -1: must be at least 0"),
        ("executor: {kind: slurm, partition: 'a,b'}", "one name without spaces or commas"),
        ("executor: {kind: slurm, heartbeat_timeout: 0}", "must be greater than 0"),
        ("executor: {kind: slurm, infra_retries: -1}", "must be at least 0"),
        ("executor: {kind: slurmm}", "Did you mean 'slurm'?"),
        ("executor: {kind: slurm, partiton: gpu}", "Did you mean 'partition'?"),
        ("executor: {partition: gpu}", "executor.partition = 'gpu': applies to Slurm jobs only. Add kind: slurm"),
        ("executor: slurm", "executor = 'slurm': must be a mapping"),
        ("concurrency: 0", "concurrency = 0: must be at least 1"),
        ("concurrency: 2.5", "concurrency = 2.5: must be a whole number"),
    ],
)
def test_bad_executor_settings_name_field_value_and_fix(extra, expected):
    rendered = problems(extra + "\n")
    assert any(expected in p for p in rendered), rendered
    assert all(p.startswith("line 7:") for p in rendered), rendered


def test_every_reserved_sbatch_option_is_refused():
    for opt in RESERVED_SBATCH_OPTIONS:
        arg = f"{opt}=1" if opt.startswith("--") else f"{opt}1"
        assert any(f"sets {opt}," in p for p in problems(f"executor: {{kind: slurm, extra_args: ['{arg}']}}\n")), opt


def test_changing_the_executor_does_not_block_resuming():
    local = parse_spec(BASE)
    slurm = parse_spec(BASE + "executor: {kind: slurm, partition: gpu, time: '10'}\n")
    assert spec_differences(local.to_dict(), slurm) == []


def test_a_resolved_spec_loads_again_whatever_its_executor():
    import yaml

    for extra in ("", "executor: {kind: slurm, partition: gpu, time: '10', extra_args: [--mem=1G]}\nconcurrency: 2\n"):
        spec = parse_spec(BASE + extra)
        resolved = {k: v for k, v in spec.to_dict().items() if k != "source"}
        again = parse_spec(yaml.safe_dump(resolved, sort_keys=False))
        assert (again.executor, again.concurrency) == (spec.executor, spec.concurrency)
