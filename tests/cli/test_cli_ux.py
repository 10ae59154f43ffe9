"""What users see around the core: help, conventions, errors that say what to do, logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import PYTHON, SCRIPTS
from tests.factories import job_spec, zeus_run_cli, zeus_run_process
from zeus_run import __version__
from zeus_run.cli import COMMANDS, LAZY, app, command_function, main, unknown_command_message

FAKE = str(SCRIPTS / "fake_train.py")
runner = CliRunner()


def spec_text(body: str = "", energy: str = "{source: estimate, watts: 100}") -> str:
    """`tests.factories.job_spec` with ``energy`` (raw YAML)."""
    return job_spec(body, energy=energy)


def zeus(*args: str, cwd: Path | None = None, env: dict | None = None):
    """``zeus-run ARGS`` in-process (no process behaviour is under test in this module but the root help's)."""
    return zeus_run_cli(*args, cwd=cwd, env=env)


# --- help and commands ---------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(command):
    r = runner.invoke(app, [command, "--help"])
    assert r.exit_code == 0, r.output
    assert "Example:" in r.output
    assert f"zeus-run {command}" in r.output or command == "run"
    # Every option has a help text (no bare option lines).
    import inspect

    for name, param in inspect.signature(command_function(command)).parameters.items():
        if name == "ctx":  # typer's context (serve: whether a subcommand runs), not an option
            continue
        info = param.default
        assert getattr(info, "help", None), f"{command}: option {name} has no help"


def test_commands_tuple_lists_every_command_module_and_its_summary():
    """`LAZY` names each command's module and function, and its summary is its docstring's first sentence."""
    import inspect
    import pkgutil

    import zeus_run.cli

    modules = {m.name for m in pkgutil.iter_modules(zeus_run.cli.__path__) if not m.name.startswith("_")}
    assert {LAZY[name].module for name in COMMANDS} == modules  # every command module is reached
    for name in COMMANDS:
        doc = inspect.getdoc(command_function(name)) or ""
        words = doc.split("\n\n")[0].split()
        end = next(i for i, w in enumerate(words) if w.endswith("."))
        assert LAZY[name].summary == " ".join(words[: end + 1]), name


@pytest.mark.parametrize("columns", [40, 60, 79, 80, 132])
def test_root_help_without_typer_is_typers_own(columns):
    """``zeus-run --help`` is answered without loading typer; typer writes the same text at every width."""
    env = {"COLUMNS": str(columns)}
    fast = zeus_run_process("--help", env={**os.environ, **env})
    via_typer = subprocess.run(
        [sys.executable, "-c", "from zeus_run.cli._app import app; app(args=['--help'], prog_name='zeus-run')"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert fast.returncode == via_typer.returncode == 0, fast.stderr + via_typer.stderr
    assert fast.stdout == via_typer.stdout
    assert zeus_run_process("-h", env={**os.environ, **env}).stdout == fast.stdout
    assert zeus("--version").stdout == f"zeus-run {__version__}\n"


def test_root_help_lists_commands_and_completion():
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0
    for command in COMMANDS:
        assert command in r.output
    assert "--install-completion" in r.output


def test_format_is_a_declared_choice_listed_in_help():
    for command in ("history", "replay", "simulate"):
        r = runner.invoke(app, [command, "--help"])
        assert "table|json|csv" in r.output.replace(" ", ""), command
    assert "table|json|yaml" in runner.invoke(app, ["check", "--help"]).output


def test_a_format_outside_the_choice_is_a_usage_error(tmp_path):
    r = runner.invoke(app, ["history", str(tmp_path), "--format", "xml"])
    assert r.exit_code == 2
    assert "xml" in r.output and "table" in r.output


def test_mistyped_command_gets_a_suggestion(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["histroy", "runs/x"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "histroy" in err and "Did you mean 'history'?" in err


def test_unknown_word_that_is_no_file_lists_the_commands():
    msg = unknown_command_message("frobnicate")
    assert msg is not None and "frobnicate" in msg and "history" in msg and "JOB.yaml" in msg
    # A spec path (even a missing one) goes to `run`, which says the file is missing.
    assert unknown_command_message("job.yaml") is None
    assert unknown_command_message("configs/nightly") is None
    assert unknown_command_message("history") is None


def test_policy_and_paper_jobs_lists_match_the_library():
    from zeus_run.cli._common import Policy
    from zeus_run.cli.simulate import PAPER_JOBS
    from zeus_run.sim import JOBS
    from zeus_run.spec._model import POLICIES

    assert tuple(p.value for p in Policy) == tuple(POLICIES)
    assert tuple(JOBS) == PAPER_JOBS


def test_help_does_not_import_numpy_yaml_or_rich():
    code = (
        "import sys\n"
        "from zeus_run.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('numpy', 'yaml', 'rich', 'rich.console', 'typer', 'typing') if m in sys.modules]\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "HEAVY="


# --- arguments that are the wrong kind of thing ---------------------------------------------------


def test_history_of_a_spec_says_what_was_passed_and_what_is_expected(write_spec):
    spec = write_spec(spec_text())
    r = runner.invoke(app, ["history", str(spec)])
    assert r.exit_code == 2
    assert "job spec" in r.output and "run directory" in r.output
    assert "corrupt" not in r.output
    assert "runs" in r.output  # the spec's own run directory is named


@pytest.mark.parametrize("command", ["history", "replay"])
def test_run_dir_commands_refuse_a_spec(write_spec, command):
    spec = write_spec(spec_text())
    r = runner.invoke(app, [command, str(spec)])
    assert r.exit_code == 2 and "run directory" in r.output


def test_history_of_another_file_is_a_usage_error(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("hello\n")
    r = runner.invoke(app, ["history", str(f)])
    assert r.exit_code == 2 and "not a run directory" in r.output


# --- beta means the same in every command ---------------------------------------------------------


def test_resolve_beta_rules():
    from zeus_run.cli._common import resolve_beta
    from zeus_run.errors import UsageError

    assert resolve_beta(None, False, 2.0) == 2.0
    assert resolve_beta(1.5, False, 2.0) == 1.5
    assert resolve_beta(None, True, 2.0) is None
    with pytest.raises(UsageError, match="greater than 0"):
        resolve_beta(0.0, False, 2.0)
    with pytest.raises(UsageError, match="contradict"):
        resolve_beta(1.5, True, 2.0)


@pytest.mark.parametrize("command", ["simulate", "replay"])
def test_beta_zero_is_refused_the_same_way_everywhere(tmp_path, command):
    args = ["squad", "--traces", str(tmp_path)] if command == "simulate" else [str(tmp_path)]
    r = runner.invoke(app, [command, *args, "--beta", "0"])
    assert r.exit_code == 2
    assert "--no-early-stop" in r.output


# --- check fails like run on a missing GPU ----------------------------------------------------------


def test_check_with_nvml_and_no_gpu_fails_like_run(write_spec):
    try:
        import pynvml

        pynvml.nvmlInit()
        pytest.skip("this machine has a working NVML")
    except Exception:
        pass
    spec = write_spec(spec_text(energy="{source: nvml}"))
    chk = zeus("check", str(spec))
    run = zeus("run", str(spec), "--no-output", cwd=spec.parent)
    assert run.returncode == 2
    assert chk.returncode == 2, chk.stdout + chk.stderr
    assert "NVML" in chk.stderr
    assert "is valid" not in chk.stdout
    chk_json = zeus("check", str(spec), "--format", "json")
    assert chk_json.returncode == 2


def test_check_formats(write_spec):
    spec = write_spec(spec_text())
    j = zeus("check", str(spec), "--format", "json")
    assert j.returncode == 0, j.stderr
    assert json.loads(j.stdout)["batch_sizes"] == [1, 2, 4]
    y = zeus("check", str(spec), "--format", "yaml")
    assert y.returncode == 0 and "default_batch_size: 2" in y.stdout and "valid" not in y.stdout


# --- logs where recurring jobs run: plain lines, N/M, elapsed, ETA, -q, -v ------------------------

OOM = str(SCRIPTS / "oom_train.py")


def oom_spec(recurrences: int = 3) -> str:
    # The paper's pruning tries 2 (the default), then 1, then 4, which runs out of memory, then 2 again.
    return f"""
optimizer: {{policy: zeus}}
name: oom
command: ["{PYTHON}", "{OOM}", "--batch-size", "{{batch_size}}", "--oom-above", "2"]
batch_sizes: [1, 2, 4]
default_batch_size: 2
target_metric: 0.9
max_epochs: 5
recurrences: {recurrences}
beta: null
energy: {{source: estimate, watts: 100}}
run_dir: runs
"""


def test_run_clock_counts_and_estimates():
    from zeus_run.cli._live import RunClock

    now = [100.0]
    c = RunClock(total=10, done=2, clock=lambda: now[0])
    assert c.current == 3 and c.eta() is None
    assert c.head() == "recurrence 3/10 | elapsed 0s | ETA --"
    now[0] = 130.0
    c.complete()  # 30 s per recurrence in this session, 7 left
    assert c.eta() == pytest.approx(210.0)
    now[0] = 140.0  # 10 s into the next one
    assert c.eta() == pytest.approx(200.0)
    assert c.head() == "recurrence 4/10 | elapsed 40s | ETA 3m20s"
    assert c.head(recurrence=3).startswith("recurrence 3/10")
    for _ in range(7):
        c.complete()
    assert c.eta() == 0.0 and c.current == 10


def test_sparkline_scales_and_bounds_its_width():
    from zeus_run.cli._render import sparkline

    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([5, 5, 5]) == "▅▅▅"
    assert sparkline([]) == ""
    assert len(sparkline(list(range(500)), width=40)) == 40
    assert set(sparkline([0, 10], ascii_only=True)) <= set("_.-~=+*#")


def test_plain_tables_are_aligned_and_never_wrapped():
    from zeus_run.cli._render import Grid

    g = Grid("title", [("a", "right"), ("outcome", "left")])
    g.add_row("1", "[green]reached[/] after " + "crashed (" + "x" * 150 + ")")
    g.add_row("22", "reached")
    lines = g.plain_lines()
    assert lines[0] == "title" and lines[1] == " a  outcome"
    assert all(line == line.rstrip() for line in lines)
    assert len(lines) == 5 and "[green]" not in lines[3] and len(lines[3]) > 150


def test_cron_log_has_plain_unwrapped_lines_with_progress_and_crash_reasons(write_spec):
    spec = write_spec(oom_spec())
    r = zeus("run", str(spec), "--no-output", cwd=spec.parent, env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    err = r.stderr.splitlines()
    assert "\x1b[" not in r.stderr + r.stdout  # no colour, no cursor movement
    ends = [line for line in err if "started" not in line and "recurrence " in line and " | try " in line]
    # One line per finished trial, each with N/M, elapsed and ETA; longer than 80 columns, not wrapped.
    assert len(ends) == 4, r.stderr
    assert all(" | elapsed " in line and " | ETA " in line for line in ends)
    assert ends[0].split(" | ")[0].endswith("recurrence 1/3") and ends[-1].split(" | ")[0].endswith("recurrence 3/3")
    crash = next(line for line in ends if "crashed" in line)
    assert "RuntimeError: CUDA out of memory" in crash and len(crash) > 80
    assert "last output:" not in r.stderr
    # The history table's outcome column names the cause.
    h = zeus("history", str(spec.parent / "runs"), env={"COLUMNS": "80"})
    assert h.returncode == 0, h.stderr
    row = next(line for line in h.stdout.splitlines() if "crashed" in line)
    assert "reached after crashed (RuntimeError: CUDA out of memory." in row
    assert row == row.rstrip() and "│" not in h.stdout
    j = zeus("history", str(spec.parent / "runs"), "--format", "json")
    trials = json.loads(j.stdout)["trials"]
    assert next(t["reason"] for t in trials if t["stop_reason"] == "crashed").startswith("RuntimeError: CUDA out of")


def test_quiet_prints_only_warnings_and_errors(write_spec):
    spec = write_spec(oom_spec())
    r = zeus("run", str(spec), "-q", cwd=spec.parent)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines, "the crash is a warning"
    assert all(" WARNING " in line or " ERROR " in line for line in lines), r.stderr
    assert any("RuntimeError: CUDA out of memory" in line for line in lines)
    # A clean quiet run prints nothing at all.
    again = zeus("run", str(spec), "-q", "-n", "4", cwd=spec.parent)
    assert again.returncode == 0 and again.stdout == ""
    assert all(" WARNING " in line for line in again.stderr.splitlines() if line.strip()), again.stderr


def test_verbose_renders_debug_lines(write_spec):
    spec = write_spec(oom_spec(recurrences=1))
    r = zeus("run", str(spec), "-v", "--no-output", cwd=spec.parent)
    assert r.returncode == 0, r.stderr
    assert " DEBUG " in r.stderr
    quiet_default = zeus("run", str(spec), "--no-output", "-n", "2", cwd=spec.parent)
    assert " DEBUG " not in quiet_default.stderr


def test_setup_logging_levels():
    import logging

    from zeus_run.cli._common import setup_logging

    root = logging.getLogger("zeus_run")
    setup_logging(verbose=True)
    assert root.level == logging.DEBUG
    setup_logging(quiet=True)
    assert root.level == logging.WARNING
    setup_logging()
    assert root.level == logging.INFO and len(root.handlers) == 1


def test_shell_completion_lists_commands_and_format_choices():
    def complete(words: str, cword: int) -> list[str]:
        env = {"_ZEUS_RUN_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
        r = zeus(env=env)
        assert r.returncode == 0, r.stderr
        return r.stdout.split()

    assert complete("zeus-run hi", 1) == ["history"]
    assert complete("zeus-run history runs/x --format ", 4) == ["table", "json", "csv"]


def test_live_line_keeps_progress_whole_at_80_columns(write_spec):
    import io
    import re

    from rich.console import Console

    from zeus_run.cli._live import LiveRunView, make_run_view
    from zeus_run.engine.core import TrialRequest
    from zeus_run.optimizer import Decision
    from zeus_run.spec import load_spec

    spec = load_spec(write_spec(spec_text(body="recurrences: 20").replace("recurrences: 1\n", "")))
    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=True, color_system=None)
    view = make_run_view(console, show_output=False, quiet=False)
    assert isinstance(view, LiveRunView)
    with view:
        view.on_run_start(spec, Path("runs/t"), "estimate: 100 W x time", 0)
        req = TrialRequest(1, 1, 0, 0, Decision(2, "pruning", "round 1"), float("inf"))
        view.on_trial_start(req, 0.123456, Path("runs/t/trials/r0001-t01"))
        view.on_epoch(3, 0.7123, 12.0, 1234.5, 2345.6)
        view.progress.refresh()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", buf.getvalue())
    lines = [line for line in text.splitlines() if "recurrence 1/20" in line]
    assert lines, buf.getvalue()
    line = lines[-1]
    assert "recurrence 1/20 | elapsed 0s | ETA --" in line
    assert len(line) <= 80 and "bs=2" in line  # the trial's details come after and are cut to fit


def test_plain_view_is_chosen_off_a_terminal():
    import io

    from rich.console import Console

    from zeus_run.cli._live import PlainRunView, QuietRunView, make_run_view

    console = Console(file=io.StringIO(), width=80)
    assert type(make_run_view(console, show_output=True, quiet=False)) is PlainRunView
    assert type(make_run_view(console, show_output=True, quiet=True)) is QuietRunView


# --- issue 28: small things people noticed --------------------------------------------------------


def test_history_dates_carry_the_time_of_day(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(spec_text())
    assert zeus("run", str(spec), "-q", "--next").returncode == 0
    r = zeus("history", str(tmp_path / "runs"), env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    import re

    assert re.search(r"\b\d{4}-\d\d-\d\d \d\d:\d\dZ\b", r.stdout), r.stdout


def test_exec_quiet_prints_no_epoch_lines(tmp_path):
    from tests.asktell.test_asktell_processes import regex_spec

    (tmp_path / "loud").mkdir()
    (tmp_path / "quiet").mkdir()
    loud = zeus("exec", "--job", str(regex_spec(tmp_path / "loud")))
    assert loud.returncode == 0, loud.stderr
    assert "zeus-run exec: epoch 1" in loud.stderr
    quiet = zeus("exec", "-q", "--job", str(regex_spec(tmp_path / "quiet")))  # the same first trial
    assert quiet.returncode == 0, quiet.stderr
    assert "zeus-run exec" not in quiet.stderr and "val_acc=" in quiet.stdout  # the command's own output passes


def test_check_prints_energy_and_gpu_lines_on_stdout(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(spec_text())
    r = zeus("check", str(spec))
    assert r.returncode == 0, r.stderr
    assert "Energy source:" in r.stdout and "GPUs:" in r.stdout
    assert "Energy source:" not in r.stderr


def test_ask_help_lists_exit_code_4_and_json_gives_the_workdir(tmp_path):
    r = runner.invoke(app, ["ask", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    assert "4 the job is done" in " ".join(r.output.split())
    spec = tmp_path / "job.yaml"
    spec.write_text(spec_text())
    a = json.loads(zeus("ask", str(spec), "--format", "json").stdout)
    assert a["workdir"] == str(tmp_path.resolve()) and Path(a["workdir"]).is_absolute()
