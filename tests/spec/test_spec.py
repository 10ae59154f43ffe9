"""Job spec validation: every problem reported at once, with field, value, fix and line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from zeus_run.asktell import ask
from zeus_run.contract import Env
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


def test_stdout_is_a_pipe_or_a_pty():
    assert parse_spec(GOOD).stdout == "pipe"
    assert parse_spec(GOOD + "stdout: pty\n").stdout == "pty"
    p = one(GOOD + "stdout: tty\n", "stdout")
    assert p.value == "tty" and p.why == "must be one of pipe, pty" and p.line == 6
    assert p.fix.startswith("Did you mean 'pty'? pty runs the command on a pseudo-terminal")


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


def test_metric_name_reaches_the_script_and_a_blank_one_is_refused(tmp_path: Path):
    f = tmp_path / "job.yaml"
    f.write_text(GOOD + "metric: {name: eval_accuracy}\nenergy: {source: estimate}\n")
    assert load_spec(f).metric.name == "eval_accuracy"
    asked = ask(f, run_dir=tmp_path / "runs")  # the trial's environment, as every executor builds it
    assert asked.env[Env.METRIC_NAME] == "eval_accuracy"
    p = one(GOOD + "metric: {name: ' val_acc'}\n", "metric.name")
    assert "as the framework logs it" in p.why and "name: eval_accuracy" in p.fix


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


# -- YAML pitfalls (issue 12) -------------------------------------------------------------


def test_duplicate_key_is_an_error_naming_both_lines():
    p = one(GOOD + "eta: 0.2\nseed: 1\neta: 0.8\n", "eta")
    assert "lines 6 and 8" in p.why and p.line == 8 and p.value == "0.8"
    p = one(GOOD + "optimizer:\n  policy: zeus\n  window_size: 3\n  policy: zeus-plus\n", "optimizer.policy")
    assert "lines 7 and 9" in p.why


def test_exponent_without_a_dot_is_a_number():
    spec = parse_spec(GOOD + "learning_rate: 1e-3\ntimeout: 2E+3\n")
    assert spec.learning_rate == 0.001 and spec.timeout == 2000.0


def test_numbers_are_decimal_not_yaml_1_1_octal_or_sexagesimal():
    spec = parse_spec(GOOD.replace("default_batch_size: 64", "default_batch_size: 064") + "seed: 010\n")
    assert spec.default_batch_size == 64 and spec.seed == 10
    assert "must be a finite number" in one(GOOD + "timeout: 1:30\n", "timeout").why


def test_env_values_keep_the_text_the_user_wrote():
    spec = parse_spec(GOOD + "env: {N: 010, HEX: 0x1F, LR: 1e-3, F: 1.50, Q: '007', B: yes, S: text}\n")
    assert dict(spec.env) == {"N": "010", "HEX": "0x1F", "LR": "1e-3", "F": "1.50", "Q": "007", "B": "yes", "S": "text"}


def test_powers_of_two_range_with_other_endpoints_warns(caplog):
    spec = parse_spec(GOOD.replace("[32, 64, 128]", "{min: 32, max: 1000}"))
    assert spec.batch_sizes == (32, 64, 128, 256, 512)
    assert "1000" in caplog.text and "powers of two" in caplog.text
    caplog.clear()
    parse_spec(GOOD.replace("[32, 64, 128]", "{min: 32, max: 512}"))
    assert "powers of two" not in caplog.text


# -- limits before anything is built (issue 13, class 5) ------------------------------------------


def billion_laughs(where: str) -> str:
    lines = ['lol0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"lol{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 10)]
    if where == "command":
        return (
            "x_anchors:\n"
            + "\n".join("  " + line for line in lines)
            + "\n"
            + GOOD.replace('command: ["python", "train.py", "--bs", "{batch_size}"]', "command: *l9")
        )
    return GOOD + "\n".join(lines) + "\n"


HOSTILE_SPECS = {
    "billion-laughs-unknown-key": billion_laughs("unknown"),
    "billion-laughs-command": billion_laughs("command"),
    "nested-3000": GOOD + "x: " + "[" * 3000 + "]" * 3000 + "\n",
    "nested-5000-block": GOOD + "".join("  " * i + f"k{i}:\n" for i in range(5000)) + "  " * 5000 + "v: 1\n",
    "5000-digit-int": GOOD + "seed: " + "7" * 5000 + "\n",
    "5000-digit-float": GOOD + "eta: 0." + "1" * 5000 + "\n",
    "huge-step-range": GOOD.replace("[32, 64, 128]", "{min: 1, max: 2000000000, step: 1}"),
    "huge-range-bounds": GOOD.replace("[32, 64, 128]", "{min: 1, max: " + "9" * 30 + "}"),
    "huge-list": GOOD.replace("[32, 64, 128]", "[" + ", ".join(str(i) for i in range(1, 5000)) + "]"),
    "recursive-alias": GOOD + "x: &a [*a]\n",
    "unbalanced-brace": GOOD.replace('"{batch_size}"', '"{batch_size"'),
    "stray-close-brace": GOOD.replace('"{batch_size}"', '"batch_size}"'),
    "window-1": GOOD + "optimizer: {window_size: 1}\n",
    "bad-timestamp-tag": GOOD + "x: !!timestamp 2020-13-45\n",
    "python-tag": GOOD + "x: !!python/object/apply:os.system ['true']\n",
    "not-utf8": "name: \udcff\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_SPECS))
def test_hostile_spec_is_a_spec_error(name):
    text = HOSTILE_SPECS[name]
    with pytest.raises(SpecError) as info:
        parse_spec(text.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
    assert info.value.exit_code == 2
    assert len(str(info.value)) < 3000  # one readable paragraph, not the expanded value


def test_large_spec_file_is_refused_before_parsing(tmp_path: Path):
    f = tmp_path / "big.yaml"
    f.write_text(GOOD + "x: [" + ", ".join(["1"] * 400_000) + "]\n")
    with pytest.raises(SpecError, match="larger than 1,048,576 bytes"):
        load_spec(f)


def test_shell_values_are_quoted():
    values = {"log_dir": "/tmp/$(touch pwned)/x y", "batch_size": 8}
    assert substitute("echo {log_dir} {batch_size}", values, shell=True) == "echo '/tmp/$(touch pwned)/x y' 8"
    assert substitute("{log_dir}", values) == "/tmp/$(touch pwned)/x y"


#: A value that breaks every naive quoting: spaces, both quotes, $, a backquote, $(...), backslashes.
NASTY = '/tmp/a b/it\'s "q" $HOME `id` $(touch pwned) \\x \\\\y'


@pytest.mark.parametrize(
    "command, expected",
    [
        ("{log_dir} {batch_size}", [NASTY, "8"]),  # bare: the rule
        ("'{log_dir}' '--bs={batch_size}'", [NASTY, "--bs=8"]),  # quoted, as older docs advised
        ('"{log_dir}" "{log_dir}/m.jsonl"', [NASTY, NASTY + "/m.jsonl"]),
        ("--out='{log_dir}'.x", ["--out=" + NASTY + ".x"]),
        ('"$(printf %s {log_dir})" "$(printf %s \'{log_dir}\')"', [NASTY, NASTY]),
        ('"`printf %s {log_dir}`"', [NASTY]),
        ("'{{literal}}' {{x}}", ["{literal}", "{x}"]),
    ],
)
def test_a_shell_command_passes_each_value_as_its_own_text_wherever_it_is_quoted(tmp_path, command, expected):
    """One quoting rule for ``shell: true``: a placeholder is its value, bare or inside quotes, through /bin/sh."""
    values = {"log_dir": NASTY, "batch_size": 8}
    show = f"{sys.executable} -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "
    line = show + substitute(command, values, shell=True)
    done = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert json.loads(done.stdout) == expected
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    "name",
    [
        "billion-laughs-command",
        "nested-5000-block",
        "5000-digit-int",
        "huge-step-range",
        "unbalanced-brace",
        "window-1",
    ],
)
def test_check_refuses_a_hostile_spec_with_exit_2_and_a_sentence(tmp_path: Path, name: str):
    from tests.factories import zeus_run_process

    f = tmp_path / "job.yaml"
    f.write_text(HOSTILE_SPECS[name])
    r = zeus_run_process("check", f, timeout=60)  # a process: a hang (the old billion laughs) fails here
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("Error:") and "problem" in r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "line, field",
    [
        ("seed: " + "1" * 61, "seed"),
        ("target_metric: " + "9" * 5000, "target_metric"),
        ("env: {A: " + "[" * 60 + "]" * 60 + "}", "env"),
        ("optimizer:\n  policy: zeus\n  window_size: " + "7" * 70, "optimizer.window_size"),
    ],
)
def test_a_value_the_yaml_reader_refuses_names_its_field_not_yaml(line, field):
    found = problems(GOOD + line + "\n")
    assert [p.field for p in found] == [field]
    assert found[0].line == len(GOOD.splitlines()) + 1 + line.count("\n")


def _laughs_in_command_block() -> str:
    items = ['&l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    items += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 10)]
    block = "command:\n  - python\n  - train.py\n" + "".join(f"  - {item}\n" for item in items)
    return GOOD.replace('command: ["python", "train.py", "--bs", "{batch_size}"]\n', block)


@pytest.mark.parametrize(
    "text, field",
    [
        (_laughs_in_command_block(), "command"),  # a billion laughs written inside `command`, one item a line
        (GOOD.replace("[32, 64, 128]", "[" * 5000 + "32" + "]" * 5000), "batch_sizes"),  # libyaml's own limit
        (
            GOOD.replace(
                "batch_sizes: [32, 64, 128]\n", "batch_sizes:\n" + "".join("  " * i + "-\n" for i in range(1, 40))
            ),
            "batch_sizes",
        ),
    ],
    ids=["billion-laughs-command-block", "batch-sizes-5000-deep", "batch-sizes-block-deep"],
)
def test_a_hostile_value_names_its_field(text, field):
    found = problems(text)
    assert [p.field for p in found] == [field], [p.render() for p in found]


def test_a_stored_spec_reads_as_it_is_written_and_a_stray_source_key_is_still_refused(tmp_path):
    import yaml

    spec = parse_spec(GOOD, source=tmp_path / "job.yaml")
    stored = tmp_path / "runs" / "spec.yaml"
    stored.parent.mkdir()
    stored.write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))  # as a run directory keeps it
    assert "source:" in stored.read_text()
    again = load_spec(stored)
    assert again.to_dict() | {"source": None} == spec.to_dict() | {"source": None}
    # In a spec a person writes, `source` at the top is a misplaced metric.source or energy.source: refused.
    p = one(GOOD + "source: events\n", "source")
    assert "unknown key" in p.why
