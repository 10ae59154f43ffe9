"""What every command shares: consoles, logging set-up, error mapping, common options."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
from collections.abc import Callable
from typing import TypeVar

import typer
from rich.console import Console
from rich.logging import RichHandler

from zeus_run._terminal import printable
from zeus_run.errors import ZeusRunError

#: Diagnostics, progress and tables meant for people go to stderr; data to stdout.
err_console = Console(stderr=True, highlight=False)
out_console = Console(highlight=False)

F = TypeVar("F", bound=Callable)

FORMATS = ("table", "json", "csv")

FormatOption = typer.Option(
    "table", "--format", "-f", help="Output format: table (for people), json or csv (for machines, on stdout)."
)
VerboseOption = typer.Option(False, "--verbose", "-v", help="Show debug logging.")
QuietOption = typer.Option(False, "--quiet", "-q", help="Only warnings and errors on stderr.")


def setup_logging(verbose: bool = False, quiet: bool = False) -> None:
    """Route library logging to stderr through rich."""
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    root = logging.getLogger("zeus_run")
    root.handlers.clear()
    handler = RichHandler(console=err_console, show_time=False, show_path=verbose, markup=False, rich_tracebacks=False)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``Error: message`` on stderr and return the exit to raise."""
    err_console.print(f"[bold red]Error:[/] {_escape(printable(message, keep_newlines=True))}")
    return typer.Exit(code)


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise fail(f"--format {fmt!r} is not one of {', '.join(FORMATS)}. Use e.g. --format json.")
    return fmt


def handle_errors(func: F) -> F:
    """Turn library errors into one-paragraph messages and exit codes; never a traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except ZeusRunError as exc:
            raise fail(str(exc), exc.exit_code) from None
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            raise fail("Interrupted.", 130) from None
        except BrokenPipeError:
            # stdout closed early (e.g. `| head`): not an error worth a message.
            with contextlib.suppress(OSError):
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115
            raise typer.Exit(0) from None
        except Exception as exc:
            if os.environ.get("ZEUS_RUN_DEBUG"):
                raise
            raise fail(
                f"internal error: {type(exc).__name__}: {exc}. This is a bug in zeus-run; "
                "set ZEUS_RUN_DEBUG=1 for a traceback and report it.",
                1,
            ) from None

    return wrapper  # type: ignore[return-value]


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
