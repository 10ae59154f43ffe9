"""The typer application of ``zeus-run``: the root command, and each command built from `zeus_run.cli.LAZY` when
it runs or shows its help (`LazyGroup`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from zeus_run import __version__
from zeus_run.cli import COMMANDS, LAZY, ROOT_HELP

#: Settings every command's Typer shares (the root's).
_SETTINGS: dict[str, Any] = {
    "rich_markup_mode": None,
    "pretty_exceptions_enable": False,
    "context_settings": {"help_option_names": ["-h", "--help"]},
}


def command_function(name: str) -> Callable[..., Any]:
    """The function behind command ``name`` (its module imported now)."""
    entry = LAZY[name]
    return getattr(importlib.import_module(f"zeus_run.cli.{entry.module}"), entry.function)


class LazyGroup(TyperGroup):
    """The root command: lists every command from `LAZY` and builds one only when it is run (or its help shown)."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in LAZY:
            return None
        one = typer.Typer(add_completion=False, **_SETTINGS)
        entry = LAZY[cmd_name]
        module = importlib.import_module(f"zeus_run.cli.{entry.module}")
        # A command with subcommands (serve, and serve tokens ...) names its click class in its module.
        cls = getattr(module, "COMMAND_CLASS", None)
        one.command(cmd_name, cls=cls)(getattr(module, entry.function))
        return verbatim_examples(typer.main.get_command(one))

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The command list from the summaries, as typer writes it, without importing any command."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, TyperCommand(name=name, help=c.summary).get_short_help_str(limit)) for name, c in LAZY.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def verbatim_examples(command: Any) -> Any:
    """``command`` (and its subcommands) with each indented paragraph of its help (an example) printed as written,
    line for line, never re-wrapped by click: an example runs as printed when pasted into a shell."""
    if command.help:
        paras = command.help.split("\n\n")
        command.help = "\n\n".join(
            "\b\n" + p if p.strip() and all(ln.startswith("    ") for ln in p.split("\n") if ln.strip()) else p
            for p in paras
        )
    for sub in getattr(command, "commands", {}).values():
        verbatim_examples(sub)
    return command


app = typer.Typer(
    name="zeus-run",
    help=ROOT_HELP,
    cls=LazyGroup,
    add_completion=True,
    no_args_is_help=True,
    **_SETTINGS,
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
