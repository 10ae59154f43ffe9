"""What every command shares: consoles, logging set-up, error mapping, common options.

This module is imported for ``zeus-run --help``, so it imports only typer and
the standard library at module level; rich and the library come in when a
command runs (``scripts/bench_startup.py`` holds ``--help`` to its budget).
"""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import typer

from zeus_run._terminal import printable
from zeus_run.errors import BUSY_EXIT_CODE, JOB_COMPLETE_EXIT_CODE, UsageError, ZeusRunError

if TYPE_CHECKING:
    from rich.console import Console

    from zeus_run.objective import Objective

F = TypeVar("F", bound=Callable)

#: Width of the consoles when the stream is not a terminal (cron, CI, Slurm logs):
#: wide enough that no table or line is ever wrapped.
PLAIN_WIDTH = 10_000


class Format(str, enum.Enum):
    """``--format`` of commands that print records: the same three words everywhere."""

    table = "table"
    json = "json"
    csv = "csv"


class Policy(str, enum.Enum):
    """``--policy``: the batch-size policies (`zeus_run.spec.POLICIES`)."""

    zeus = "zeus"
    zeus_plus = "zeus-plus"
    zeus_voi = "zeus-voi"


class CheckFormat(str, enum.Enum):
    """``--format`` of ``check``: the resolved spec for people, or as JSON/YAML for machines."""

    table = "table"
    json = "json"
    yaml = "yaml"


FORMAT_HELP = "table: for people (plain aligned text when not on a terminal); json or csv: for machines, on stdout."

FormatOption = typer.Option(Format.table, "--format", "-f", case_sensitive=False, help=FORMAT_HELP)
VerboseOption = typer.Option(False, "--verbose", "-v", help="Debug logging (e.g. the exact command of each trial).")
QuietOption = typer.Option(False, "--quiet", "-q", help="Only warnings and errors, on stderr.")
IdempotencyKeyOption = typer.Option(
    None,
    "--idempotency-key",
    help="A key of your choice (a UUID) for this request: run the same command with the same key again "
    "(a retry after a lost answer) and it answers as the first did instead of doing it twice.",
)


def eta_option(default: str) -> Any:
    """``--eta``: the same meaning in every command; ``default`` says what applies without it."""
    return typer.Option(
        None,
        "--eta",
        min=0.0,
        max=1.0,
        help=f"Energy weight of the cost, in [0, 1] (0: time only, 1: energy only). Default: {default}.",
    )


def objective_option(default: str) -> Any:
    """``--objective``: the same forms in every command (`zeus_run.objective.parse_objective`)."""
    return typer.Option(
        None,
        "--objective",
        metavar="KIND[=VALUE]",
        help="What to minimise: cost=ETA (energy-time cost), energy, time, or max-slowdown=FACTOR "
        f"(least energy with time <= FACTOR x the time at the max power limit). Default: {default}.",
    )


def resolve_objective(objective: str | None, eta: float | None) -> Objective | None:
    """The objective of ``--objective`` (None when absent); ``--eta`` only goes with ``cost``.

    Raises:
        UsageError: An unknown form, or ``--eta`` with another kind.
    """
    from zeus_run.objective import ObjectiveError, parse_objective

    if objective is None:
        return None
    try:
        parsed = parse_objective(objective)
    except ObjectiveError as exc:
        raise UsageError(str(exc)) from None
    if eta is not None:
        raise UsageError(f"--eta and --objective {objective} both set the objective; use --objective cost={eta:g}.")
    return parsed


def beta_option(default: str) -> Any:
    """``--beta``: the same meaning in every command; ``default`` says what applies without it."""
    # No min=: resolve_beta refuses 0 and below with a message naming --no-early-stop.
    return typer.Option(
        None,
        "--beta",
        help="Early stop: end a trial once its cost would exceed BETA x the cheapest recurrence so far (> 0; "
        f"--no-early-stop disables it). Default: {default}.",
    )


NoEarlyStopOption = typer.Option(False, "--no-early-stop", help="Disable early stopping (beta: null).")


def resolve_beta(beta: float | None, no_early_stop: bool, default: float | None) -> float | None:
    """The early-stop beta from ``--beta``/``--no-early-stop`` (same rules in every command).

    Raises:
        UsageError: ``--beta`` is not above 0, or both options are given.
    """
    if no_early_stop and beta is not None:
        raise UsageError("--beta and --no-early-stop contradict each other; pass one of them.")
    if no_early_stop:
        return None
    if beta is None:
        return default
    if beta <= 0:
        raise UsageError(f"--beta {beta:g} must be greater than 0; use --no-early-stop to disable early stopping.")
    return beta


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal (not a file, pipe or test capture)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def make_console(stderr: bool = False) -> Console:
    """A rich console on stdout or stderr.

    On a terminal it is rich's usual one. Elsewhere (cron, CI, Slurm, a pipe) it
    prints plain lines: no colour, no cursor movement, and wide enough that
    nothing is wrapped or cut.
    """
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if is_terminal(stream):
        return Console(stderr=stderr, highlight=False)
    return Console(
        stderr=stderr,
        highlight=False,
        width=PLAIN_WIDTH,
        no_color=True,
        color_system=None,
        emoji=False,
        soft_wrap=True,
        force_terminal=False,
    )


def err_console() -> Console:
    """Console for diagnostics, progress and summaries meant for people (stderr)."""
    return make_console(stderr=True)


def out_console() -> Console:
    """Console for tables and data (stdout)."""
    return make_console(stderr=False)


def setup_logging(verbose: bool = False, quiet: bool = False) -> None:
    """Route the library's logging to stderr.

    Args:
        verbose: DEBUG and up (e.g. the exact command line of each trial).
        quiet: WARNING and up only.
    """
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    root = logging.getLogger("zeus_run")
    root.handlers.clear()
    handler: logging.Handler
    if is_terminal(sys.stderr):
        from rich.logging import RichHandler

        handler = RichHandler(
            console=err_console(), show_time=False, show_path=verbose, markup=False, rich_tracebacks=False
        )
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        # NOTE: the stream is looked up when each record is written, so a test
        # capturing sys.stderr after set-up still sees the lines.
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False


class _StderrHandler(logging.StreamHandler):
    """A plain handler on whatever ``sys.stderr`` is at the time of writing."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``Error: message`` on stderr and return the exit to raise."""
    from rich.markup import escape

    err_console().print(f"[bold red]Error:[/] {escape(printable(message, keep_newlines=True))}")
    return typer.Exit(code)


def done(message: str, code: int) -> typer.Exit:
    """Print ``message`` on stderr, with no ``Error:`` (a busy run directory, a job with nothing left to
    ask: the scheduler's skip, not a failure), and return the exit to raise."""
    from rich.markup import escape

    err_console().print(escape(printable(message, keep_newlines=True)))
    return typer.Exit(code)


def run_dir_history(path: Path) -> Path:
    """The history file behind a RUN_DIR argument.

    Raises:
        UsageError: ``path`` is a job spec or another file that is not a history;
            the message says what was passed and what is expected.
        HistoryError: No history there.
    """
    from zeus_run.rundir.history import resolve_history_path

    if path.is_file() and path.suffix.lower() in (".yaml", ".yml"):
        hint = _run_dir_of_spec(path)
        raise UsageError(
            f"{str(path)!r} is a job spec (YAML); this command reads a run directory (or its history.jsonl)."
            + (f" This spec's runs are in {hint}: pass that." if hint else " Pass e.g. runs/<name>.")
        )
    if path.is_file() and path.suffix.lower() not in (".jsonl", ".json"):
        raise UsageError(
            f"{str(path)!r} is a file, not a run directory; pass a run directory (e.g. runs/<name>) "
            "or the history.jsonl inside one."
        )
    return resolve_history_path(path)


def _run_dir_of_spec(path: Path) -> str | None:
    try:
        from zeus_run.spec import load_spec

        run_dir = load_spec(path).run_dir
    except (ZeusRunError, OSError):
        return None
    try:
        return str(run_dir.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(run_dir)


def handle_errors(func: F) -> F:
    """Turn library errors into one-paragraph messages and exit codes; never a traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except ZeusRunError as exc:
            if exc.exit_code in (BUSY_EXIT_CODE, JOB_COMPLETE_EXIT_CODE):
                raise done(str(exc), exc.exit_code) from None  # busy or nothing left: not an error
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
