"""The ``zeus-run`` command line: a thin typer layer over the library.

Importing this package loads typer and the command signatures only; each
command imports the library (numpy, YAML, rich) when it runs, so ``--help``
and shell completion stay fast (``scripts/bench_startup.py``).
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import typer

from zeus_run import __version__
from zeus_run.cli.ask import ask_command
from zeus_run.cli.cancel import cancel_command
from zeus_run.cli.check import check_command
from zeus_run.cli.exec_ import exec_command
from zeus_run.cli.export import export_command
from zeus_run.cli.history import history_command
from zeus_run.cli.plot import plot_command
from zeus_run.cli.replay import replay_command
from zeus_run.cli.report import report_command
from zeus_run.cli.run import run_command
from zeus_run.cli.serve import ServeGroup, serve_command
from zeus_run.cli.simulate import simulate_command
from zeus_run.cli.tell import heartbeat_command, tell_command

app = typer.Typer(
    name="zeus-run",
    help=(
        "Run recurring training jobs with the Zeus energy optimizer: it picks each recurrence's batch size "
        "(and GPU power limit) to cut energy and time.\n\n"
        "Example: zeus-run configs/demo.yaml   (same as: zeus-run run configs/demo.yaml)"
    ),
    add_completion=True,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"zeus-run {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool | None = typer.Option(
        None, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """zeus-run."""


app.command("run")(run_command)
app.command("history")(history_command)
app.command("plot")(plot_command)
app.command("check")(check_command)
app.command("simulate")(simulate_command)
app.command("replay")(replay_command)
app.command("export")(export_command)
app.command("report")(report_command)
app.command("ask")(ask_command)
app.command("exec")(exec_command)
app.command("tell")(tell_command)
app.command("heartbeat")(heartbeat_command)
app.command("cancel")(cancel_command)
app.command("serve", cls=ServeGroup)(serve_command)  # type: ignore[arg-type]  # serve, and serve tokens ...

COMMANDS = (
    *("run", "history", "plot", "check", "simulate", "replay", "export", "report"),
    *("ask", "exec", "tell", "heartbeat", "cancel", "serve"),
)


def unknown_command_message(word: str) -> str | None:
    """Why ``zeus-run WORD ...`` cannot be a job spec, or None if it may be one.

    ``zeus-run JOB.yaml`` is short for ``zeus-run run JOB.yaml``, so a first
    word that is neither a command nor something that looks like a file would
    otherwise reach ``run`` and fail there with a puzzling message.
    """
    if word in COMMANDS or Path(word).exists() or word.endswith((".yaml", ".yml")) or "/" in word:
        return None
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
    if args and not args[0].startswith("-") and args[0] not in COMMANDS:
        problem = unknown_command_message(args[0])
        if problem is not None:
            from zeus_run.cli._common import fail

            raise SystemExit(fail(problem).exit_code)
        args.insert(0, "run")
    app(args=_bare_next(args), prog_name="zeus-run")


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
