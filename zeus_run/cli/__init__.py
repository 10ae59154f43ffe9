"""The ``zeus-run`` command line: a thin typer layer over the library."""

from __future__ import annotations

import sys

import typer

from zeus_run import __version__
from zeus_run.cli.check import check_command
from zeus_run.cli.history import history_command
from zeus_run.cli.replay import replay_command
from zeus_run.cli.run import run_command
from zeus_run.cli.simulate import simulate_command

app = typer.Typer(
    name="zeus-run",
    help=(
        "Run recurring training jobs with the Zeus energy optimizer: it picks each recurrence's batch size "
        "(and GPU power limit) to cut energy and time.\n\n"
        "Example: zeus-run configs/demo.yaml   (same as: zeus-run run configs/demo.yaml)"
    ),
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
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
app.command("check")(check_command)
app.command("simulate")(simulate_command)
app.command("replay")(replay_command)

COMMANDS = ("run", "history", "check", "simulate", "replay")


def main(argv: list[str] | None = None) -> None:
    """Entry point; ``zeus-run JOB.yaml`` is short for ``zeus-run run JOB.yaml``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and not args[0].startswith("-") and args[0] not in COMMANDS:
        args.insert(0, "run")
    app(args=args, prog_name="zeus-run")
