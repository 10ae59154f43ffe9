"""Help that pastes (issue 55, item 9): every command's ``--help`` prints its examples line for line as written,
each one is a shell command line, and those of the ask/tell doors (ask, exec, tell, cancel) run as printed, pasted
into a shell against a local job."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.factories import zeus_run_cli
from zeus_run.cli import COMMANDS, command_function

#: The commands whose examples run here as printed (a placeholder token replaced by a real ask's).
RUN_HERE = ("ask", "exec", "tell", "cancel")
#: An example's placeholder for an ask's token.
PLACEHOLDER = "6f1c0a..."

TRAIN = """\
from zeus_run.train import Trial

trial = Trial.from_env(batch_size=32)
accuracy = 0.0
for epoch in trial.epochs():
    accuracy = min(accuracy + 0.5, 1.0)
    trial.report(accuracy)
"""

JOB = """\
name: nightly
command: ["{python}", "train.py"]
batch_sizes: [16, 32, 64]
default_batch_size: 32
target_metric: 0.9
recurrences: null
concurrency: 8
"""


def examples(help_text: str, indent: int = 6) -> list[str]:
    """The example lines of a help text: each indented line of the paragraphs after ``Example:``, and an example
    given on that line itself (``indent``: the examples' indentation; a help prints them 6 columns in)."""
    out: list[str] = []
    lines = help_text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("Example:"):
            inline = line.strip().removeprefix("Example:").strip()
            if inline:
                out.append(inline)
                continue
            for more in lines[i + 1 :]:
                if more.strip() and not more.startswith(" " * indent):
                    break  # the next section (Arguments:, Options:)
                if more.strip():
                    out.append(more.strip())
    return out


def help_of(*words: str) -> str:
    r = zeus_run_cli(*words, "--help", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    return r.stdout


def every_help() -> dict[str, str]:
    """Each command's help (and the root's, and serve's subcommands'), by its words."""
    out = {"": help_of()}
    for name in COMMANDS:
        out[name] = help_of(name)
    for sub in ("tokens", "tokens list", "tokens rotate", "tokens revoke", "register"):
        out[f"serve {sub}"] = help_of("serve", *sub.split())
    return out


def test_every_example_is_printed_as_written_and_parses_as_a_shell_line():
    helps = every_help()
    for name in COMMANDS:
        written = [ln.strip() for ln in examples(inspect.getdoc(command_function(name)) or "", indent=4)]
        written = [ln for ln in written if ln]
        assert written, f"{name}: its docstring has no example"
        assert examples(helps[name]) == written, f"zeus-run {name} --help re-wrapped its examples"
    for words, text in helps.items():
        found = examples(text)
        assert found, f"zeus-run {words} --help has no example"
        for line in found:
            checked = subprocess.run(["bash", "-n", "-c", line], capture_output=True, text=True)
            assert checked.returncode == 0, f"zeus-run {words} --help: {line!r} is not a shell line: {checked.stderr}"
            # `eval "$(zeus-run ask ...)"` loses the ask's exit code (docs/ask-tell.md)
            assert 'eval "$(' not in line, f"zeus-run {words} --help: {line!r} loses the ask's exit code"


def test_the_ask_tell_examples_run_as_printed_against_a_local_job(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "job.yaml").write_text(JOB)
    bin_dir = str(Path(sys.executable).parent)  # zeus-run and python, as on a user's PATH after `pip install`
    base = {k: v for k, v in os.environ.items() if not k.startswith("ZEUS_") or k == "ZEUS_RUN_POWERCAP_ROOT"}
    base["PATH"] = bin_dir + os.pathsep + base.get("PATH", "")
    base["PIPELINE_RUN_ID"] = "pipeline-run-7"  # what an orchestrator's step has (ask's idempotency example)

    def shell(line: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    ran = 0
    for name in RUN_HERE:
        for line in examples(help_of(name)):
            env = dict(base)
            if PLACEHOLDER in line or "$ZEUS_ASK_TOKEN" in line:  # a tell or cancel of an ask made for it
                asked = shell("zeus-run ask job.yaml --format json", base)
                assert asked.returncode == 0, asked.stderr
                answer = json.loads(asked.stdout)
                token, run_dir = answer["token"], answer["run_dir"]
                env.update(ZEUS_RUN_DIR=run_dir, ZEUS_ASK_TOKEN=token)
                env.update(answer.get("env") or {})  # what the script reads (ZEUS_BATCH_SIZE, its trial directory)
                line = line.replace(PLACEHOLDER, token)
            done = shell(line, env)
            assert done.returncode == 0, (
                f"zeus-run {name} --help's example {line!r} exited {done.returncode}: " + (done.stderr[-1500:])
            )
            ran += 1
    history = (tmp_path / "runs" / "nightly" / "history.jsonl").read_text().splitlines()
    assert ran >= 8 and len(history) >= 6, (ran, len(history))
    assert json.loads(history[0])["reached"] is True, history[0]
