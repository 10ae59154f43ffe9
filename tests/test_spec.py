"""Job spec validation: every problem reported at once, with field, value, fix and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from zeus_run.errors import SpecError, UsageError
from zeus_run.spec import load_spec, parse_spec, placeholder_names, substitute

GOOD = """\
name: job
command: ["python", "train.py", "--bs", "{batch_size}"]
batch_sizes: [32, 64, 128]
default_batch_size: 64
target_metric: 0.9
"""


def problems(text: str) -> list:
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    return info.value.problems


def one(text: str, field: str):
    found = [p for p in problems(text) if p.field == field]
    assert found, f"no problem reported for {field}"
    return found[0]


def test_good_spec_resolves_defaults():
    spec = parse_spec(GOOD)
    assert spec.batch_sizes == (32, 64, 128)
    assert spec.eta == 0.5 and spec.beta == 2.0 and spec.max_tries == 20
    assert spec.optimizer.policy == "zeus-voi" and spec.optimizer.window_size == 0
    assert (spec.optimizer.pruning_rounds, spec.optimizer.num_explorations) == (0, 1) and spec.seed == 123456
    assert spec.command == ("python", "train.py", "--bs", "{batch_size}")
    assert spec.metric.source == "events" and spec.energy.source == "auto"


def test_policy_sets_its_own_defaults_and_explicit_knobs_win():
    plus = parse_spec(GOOD + "optimizer: {policy: zeus-plus}\n").optimizer
    assert (plus.pruning_rounds, plus.num_explorations) == (1, 1)
    paper = parse_spec(GOOD + "optimizer: {policy: zeus}\n").optimizer
    assert (paper.pruning_rounds, paper.num_explorations) == (2, 2)
    mine = parse_spec(GOOD + "optimizer: {policy: zeus-plus, pruning_rounds: 2}\n").optimizer
    assert (mine.pruning_rounds, mine.num_explorations) == (2, 1)
    assert one(GOOD + "optimizer: {policy: greedy}\n", "optimizer.policy").value == "greedy"


def test_bad_yaml_reports_line():
    p = one("name: job\ncommand: [a, b\nbatch_sizes: [1]\n", "(yaml)")
    assert p.line is not None and p.line >= 2
    assert "YAML" in p.why


def test_unknown_key_suggests_the_close_one():
    p = one(GOOD + "beta_knob: 2\n", "beta_knob")
    assert "unknown key" in p.why and "'beta'" in p.fix
    assert p.line == 6
    p = one(GOOD + "optimizer:\n  windw_size: 3\n", "optimizer.windw_size")
    assert "'window_size'" in p.fix and p.line == 7


def test_default_not_in_list():
    p = one(GOOD.replace("default_batch_size: 64", "default_batch_size: 48"), "default_batch_size")
    assert p.value == 48 and "[32, 64, 128]" in p.why and p.line == 4


@pytest.mark.parametrize("eta", [-0.1, 1.5])
def test_eta_out_of_range(eta):
    p = one(GOOD + f"eta: {eta}\n", "eta")
    assert p.value == eta and "[0, 1]" in p.fix


@pytest.mark.parametrize("beta", [0, -1])
def test_beta_must_be_positive(beta):
    p = one(GOOD + f"beta: {beta}\n", "beta")
    assert "greater than 0" in p.why and "null" in p.fix


def test_beta_null_disables_early_stopping():
    assert parse_spec(GOOD + "beta: null\n").beta is None


def test_empty_batch_sizes():
    p = one(GOOD.replace("[32, 64, 128]", "[]"), "batch_sizes")
    assert "empty" in p.why


def test_missing_command():
    text = "\n".join(line for line in GOOD.splitlines() if not line.startswith("command"))
    p = one(text, "command")
    assert "required" in p.why and p.value is None


def test_all_problems_at_once():
    text = GOOD.replace("default_batch_size: 64", "default_batch_size: 48") + "eta: 2\nbeta: 0\nrecurrences: 0\n"
    fields = {p.field for p in problems(text)}
    assert {"default_batch_size", "eta", "beta", "recurrences"} <= fields


def test_range_form_is_powers_of_two():
    spec = parse_spec(GOOD.replace("[32, 64, 128]", "{min: 20, max: 300}"))
    assert spec.batch_sizes == (32, 64, 128, 256)
    spec = parse_spec(GOOD.replace("[32, 64, 128]", "{min: 32, max: 128, step: 32}"))
    assert spec.batch_sizes == (32, 64, 96, 128)


def test_string_command_is_split_with_shlex():
    spec = parse_spec(
        GOOD.replace(
            'command: ["python", "train.py", "--bs", "{batch_size}"]', "command: python 'my train.py' --bs {batch_size}"
        )
    )
    assert spec.command == ("python", "my train.py", "--bs", "{batch_size}")


def test_unknown_placeholder_and_learning_rate_without_value():
    p = one(GOOD.replace("{batch_size}", "{batchsize}"), "command")
    assert "{batchsize}" in p.why and "{batch_size}" in p.fix
    p = one(GOOD.replace("{batch_size}", "{learning_rate}"), "command")
    assert "learning_rate is not set" in p.why


def test_regex_needs_a_group():
    p = one(GOOD + "metric:\n  regex: 'acc=[0-9.]+'\n", "metric.regex")
    assert "capture group" in p.why


def test_error_message_names_everything(tmp_path: Path):
    f = tmp_path / "job.yaml"
    f.write_text(GOOD + "eta: 3\n")
    with pytest.raises(SpecError) as info:
        load_spec(f)
    msg = str(info.value)
    assert str(f) in msg and "line 6" in msg and "eta = 3" in msg and "[0, 1]" in msg
    assert info.value.exit_code == 2


def test_missing_file_is_a_usage_error(tmp_path: Path):
    with pytest.raises(UsageError) as info:
        load_spec(tmp_path / "nope.yaml")
    assert info.value.exit_code == 2 and "does not exist" in str(info.value)


def test_relative_paths_start_at_the_spec_folder(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    f = tmp_path / "sub" / "job.yaml"
    f.write_text(GOOD + "workdir: .\nrun_dir: out\n")
    spec = load_spec(f)
    assert spec.workdir == (tmp_path / "sub").resolve()
    assert spec.run_dir == (tmp_path / "sub" / "out").resolve()


def test_placeholder_substitution_is_whole_value():
    values = {"batch_size": 64, "learning_rate": "0.1; rm -rf /", "seed": 7}
    assert substitute("--bs={batch_size}", values) == "--bs=64"
    assert substitute("{learning_rate}", values) == "0.1; rm -rf /"
    assert substitute("{{literal}} {seed}", values) == "{literal} 7"
    assert placeholder_names("a {batch_size} {{x}} {seed}") == ["batch_size", "seed"]
