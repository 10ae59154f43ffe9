"""The ``zeus-run`` command line: a thin typer layer over the library.

Importing this package loads the table of commands only (`LAZY`), not even typer: a
command's module, its options and the library (numpy, YAML, rich) are imported when
that command runs or shows its help (`zeus_run.cli._app`, the typer application), and
``zeus-run --help`` and ``--version`` are answered without typer (`root_help`, which
``tests/cli/test_cli_ux.py`` holds equal to typer's own help), so they stay fast
(``scripts/bench_startup.py``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from zeus_run import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without loading typing (mypy reads it alike)
if TYPE_CHECKING:
    from typing import Any


class LazyCommand:
    """Where a command lives, and its summary for ``zeus-run --help`` (its docstring's first sentence).

    (A plain class: `typing.NamedTuple` would load `typing` for ``--help``.)
    """

    __slots__ = ("function", "module", "summary")

    def __init__(self, module: str, function: str, summary: str) -> None:
        self.module = module
        self.function = function
        self.summary = summary


#: Every command: its module under ``zeus_run.cli``, its function, and the first sentence of that function's
#: docstring (``tests/cli/test_cli_ux.py`` holds them equal).
LAZY: dict[str, LazyCommand] = {
    "run": LazyCommand(
        "run", "run_command", "Run a recurring training job, choosing each recurrence's batch size with Zeus."
    ),
    "history": LazyCommand(
        "history",
        "history_command",
        "Show a run's recurrences, per-batch-size statistics, the savings and a recommended setting.",
    ),
    "plot": LazyCommand(
        "plot",
        "plot_command",
        "Draw a run into an image: cost per recurrence against the default batch size's, batch size and power "
        "limit over time, and each batch size's cost distribution.",
    ),
    "check": LazyCommand(
        "check",
        "check_command",
        "Validate a job spec and print the resolved settings, the learning rate per batch size, and the energy "
        "source detected.",
    ),
    "simulate": LazyCommand(
        "simulate",
        "simulate_command",
        "Replay recurring jobs on traces with the same optimizer as real runs, against Default, Oracle and grid "
        "search.",
    ),
    "replay": LazyCommand(
        "replay",
        "replay_command",
        "Audit a run, or evaluate what other knobs would have done on its recorded outcomes.",
    ),
    "export": LazyCommand(
        "export",
        "export_command",
        "Export run directories: to MLflow (a parent run per job, a nested run per trial) or Prometheus (text format).",
    ),
    "report": LazyCommand(
        "report",
        "report_command",
        "Write a self-contained HTML report of a run: summary, per-batch-size table, plots and the decision audit.",
    ),
    "ask": LazyCommand(
        "ask",
        "ask_command",
        "Reserve the next trial and print the decision: batch size, learning rate, seed, recurrence and try, the "
        "token, the trial directory, the cost threshold, max_epochs, the command and the environment the "
        "zeus_run.train helper reads.",
    ),
    "exec": LazyCommand(
        "exec_",
        "exec_command",
        "Run a command as an ask's trial, under the trial agent: energy measured here (NVML on this node's GPUs, "
        "or the labelled estimate), epochs read from the event log or the spec's regex, the stop rules enforced "
        "here (target, max_epochs, the ask's cost threshold), the lease renewed every second.",
    ),
    "tell": LazyCommand(
        "tell",
        "tell_command",
        "Close an ask's trial: record it from the events it wrote into its directory (or from the agent's outcome "
        "under `zeus-run exec`), with --energy/--time when nothing measured them (marked in the record as "
        "reported, not measured), and fold it into the history.",
    ),
    "heartbeat": LazyCommand(
        "tell",
        "heartbeat_command",
        "Renew an ask's lease (for a trial that neither runs under `zeus-run exec` nor uses zeus_run.train.Trial, "
        "which renew it themselves).",
    ),
    "cancel": LazyCommand(
        "cancel",
        "cancel_command",
        "Release an ask that will never be told (its answer was lost, its pod is gone): it is recorded at once as "
        "an infrastructure failure, as an expired lease is, not fed to the optimizer, and its recurrence goes to "
        "the next ask.",
    ),
    "when": LazyCommand(
        "when",
        "when_command",
        "Print when the next recurrence should start: the lowest-carbon start before its deadline, or now.",
    ),
    "serve": LazyCommand(
        "serve",
        "serve_command",
        "Serve jobs over HTTP to training scripts that share no filesystem with zeus-run (pods, managed services).",
    ),
}

COMMANDS = tuple(LAZY)

#: The root's help text (`root_help`; the typer application's too).
ROOT_HELP = (
    "Run recurring training jobs with the Zeus energy optimizer: it picks each recurrence's batch size "
    "(and GPU power limit) to cut energy and time.\n\n"
    "Example: zeus-run configs/demo.yaml  # or: zeus-run run configs/demo.yaml"
)
#: The root's options and their help, as typer lists them (`root_help`).
ROOT_OPTIONS = (
    ("--version", "Print the version and exit."),
    ("--install-completion", "Install completion for the current shell."),
    ("--show-completion", "Show completion for the current shell, to copy it or customize the installation."),
    ("-h, --help", "Show this message and exit."),
)


def __getattr__(name: str) -> Any:
    if name in ("app", "LazyGroup", "command_function"):  # the typer application, loaded on first use
        from zeus_run.cli import _app

        return getattr(_app, name)
    raise AttributeError(f"module 'zeus_run.cli' has no attribute {name!r}")


def unknown_command_message(word: str) -> str | None:
    """Why ``zeus-run WORD ...`` cannot be a job spec, or None if it may be one.

    ``zeus-run JOB.yaml`` is short for ``zeus-run run JOB.yaml``, so a first
    word that is neither a command nor something that looks like a file would
    otherwise reach ``run`` and fail there with a puzzling message.
    """
    if word in COMMANDS or Path(word).exists() or word.endswith((".yaml", ".yml")) or "/" in word:
        return None
    import difflib

    close = difflib.get_close_matches(word, COMMANDS, n=1, cutoff=0.6)
    if close:
        return f"No such command {word!r}. Did you mean {close[0]!r}?"
    return (
        f"No such command or job spec {word!r}. Commands: {', '.join(COMMANDS)}; "
        "or pass a job spec: zeus-run JOB.yaml. See zeus-run --help."
    )


def main(argv: list[str] | None = None) -> None:
    """Entry point; ``zeus-run JOB.yaml`` is short for ``zeus-run run JOB.yaml``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--help"], ["-h"], ["--version"]):  # answered without loading typer
        sys.stdout.write(root_help() if args[0] != "--version" else f"zeus-run {__version__}\n")
        raise SystemExit(0)
    if args and not args[0].startswith("-") and args[0] not in COMMANDS:
        problem = unknown_command_message(args[0])
        if problem is not None:
            from zeus_run.cli._common import fail

            raise SystemExit(fail(problem).exit_code)
        args.insert(0, "run")
    if args[:1] == ["run"]:  # a scheduler's trigger: read without typer's parser where it can be
        from zeus_run.cli._fastrun import call_run, run_kwargs

        kwargs = run_kwargs(args[1:])
        if kwargs is not None:
            call_run(kwargs)
    from zeus_run.cli._app import app

    app(args=_bare_next(args), prog_name="zeus-run")


def root_help(columns: int | None = None) -> str:
    """``zeus-run --help`` as typer writes it (plain: ``rich_markup_mode`` None), without loading typer.

    Click's layout: text at the terminal's width (at most 80 columns) less 2, at least 50;
    options and commands as definition lists (first column at most 30 wide, 2 apart); each
    command's summary cut to the width left, at a sentence's end or with "...".

    Args:
        columns: The terminal's width (None: as click reads it, `_columns`).
    """
    import textwrap

    width = max(min(_columns() if columns is None else columns, 80) - 2, 50)

    def wrap(text: str, at: int, indent: str = "") -> list[str]:
        out: list[str] = []
        for i, para in enumerate(text.split("\n\n")):
            wrapper = textwrap.TextWrapper(
                at, initial_indent=indent, subsequent_indent=indent, replace_whitespace=False
            )
            out += ([""] if i else []) + wrapper.wrap(para)
        return out

    def dl(rows: list[tuple[str, str]]) -> list[str]:
        first = min(max(len(term) for term, _ in rows), 30) + 2
        out = []
        for term, text in rows:
            lines = wrap(text, max(width - first - 2, 10))
            head = f"  {term}" + (" " * (first - len(term)) if len(term) <= first - 2 else "\n" + " " * (first + 2))
            out.append(head + (lines[0] if lines else ""))
            out += [" " * (first + 2) + line for line in lines[1:]]
        return out

    limit = width - 6 - max(len(name) for name in COMMANDS)
    commands = [(name, _short_help(c.summary, limit)) for name, c in LAZY.items()]
    lines = ["Usage: zeus-run [OPTIONS] COMMAND [ARGS]...", "", *wrap(ROOT_HELP, width, "  "), ""]
    lines += ["Options:", *dl(list(ROOT_OPTIONS)), "", "Commands:", *dl(commands)]
    return "\n".join(lines) + "\n"


def _columns() -> int:
    """The terminal's width as `shutil.get_terminal_size` reads it (``COLUMNS``, else the terminal's, else 80),
    without loading `shutil` (which loads the compression modules)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


def _short_help(text: str, limit: int) -> str:
    """A summary cut to ``limit`` characters as click cuts a command's help: at the first sentence's end, else the
    last whole word that leaves room for "..."."""
    words = text.split()
    total = 0
    for i, word in enumerate(words):
        total += len(word) + (i > 0)
        if total > limit:
            break
        if word.endswith("."):
            return " ".join(words[: i + 1])
        if total == limit and i != len(words) - 1:
            break
    else:
        return " ".join(words)
    total += 3
    while i > 0:
        total -= len(words[i]) + (i > 0)
        if total <= limit:
            break
        i -= 1
    return " ".join(words[:i]) + "..."


def _bare_next(args: list[str]) -> list[str]:
    """``--next`` without a count means ``--next 1`` (one recurrence per scheduler trigger)."""
    out: list[str] = []
    for i, a in enumerate(args):
        out.append(a)
        if a == "--":
            out.extend(args[i + 1 :])
            break
        if a == "--next" and not (i + 1 < len(args) and args[i + 1].isdigit()):
            out.append("1")
    return out
