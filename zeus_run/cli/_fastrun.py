"""``zeus-run run`` read without typer's parser, for the scheduler's trigger (`run_kwargs`, `call_run`).

A cron trigger (``zeus-run run job.yaml --next -q``) pays for its command line every night: typer builds a
pydantic adapter for each of ``run``'s parameters, which loads pydantic (about 0.2 s of CPU, a quarter of a
trigger's own). A command line made only of ``run``'s own options, each written out and well formed, is read
here into the keyword arguments typer would pass to `zeus_run.cli.run.run_command`; anything else (``--help``,
an unknown option, ``--opt=value``, a count below 1, a second argument) returns None and goes to typer, which
says what is wrong. `tests/cli/test_fastrun.py` reads every form both ways and compares.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

#: Options that take a value: the parameter each sets, and whether the value is a count (at least 1) or a path.
_VALUED: dict[str, tuple[str, bool]] = {
    "--run-dir": ("run_dir", False),
    "-d": ("run_dir", False),
    "--recurrences": ("recurrences", True),
    "-n": ("recurrences", True),
    "--warm-from": ("warm_from", False),
}
#: Flags: the parameter each sets to True.
_FLAGS = {
    "--new": "new",
    "--force": "force",
    "--no-output": "no_output",
    "--verbose": "verbose",
    "-v": "verbose",
    "--quiet": "quiet",
    "-q": "quiet",
}


def run_kwargs(args: list[str]) -> dict[str, Any] | None:
    """The keyword arguments of `zeus_run.cli.run.run_command` for ``zeus-run run ARGS``, or None where typer
    must read them (anything but ``run``'s own options written out, each well formed, and one job spec)."""
    out: dict[str, Any] = {
        "spec_path": None,
        "run_dir": None,
        "recurrences": None,
        "next_k": None,
        "new": False,
        "force": False,
        "no_output": False,
        "warm_from": None,
        "verbose": False,
        "quiet": False,
    }
    i = 0
    while i < len(args):
        a = args[i]
        if a in _FLAGS:
            out[_FLAGS[a]] = True
            i += 1
        elif a == "--next":  # a bare --next is one recurrence (`zeus_run.cli._bare_next`)
            counted = i + 1 < len(args) and args[i + 1].isdigit()
            k = int(args[i + 1]) if counted else 1
            if k < 1:
                return None
            out["next_k"] = k
            i += 2 if counted else 1
        elif a in _VALUED:
            if i + 1 >= len(args) or args[i + 1].startswith("-"):
                return None
            key, count = _VALUED[a]
            value = args[i + 1]
            if count and not (value.isdigit() and int(value) >= 1):
                return None
            out[key] = int(value) if count else Path(value)
            i += 2
        elif a.startswith("-") or out["spec_path"] is not None:
            return None
        else:
            out["spec_path"] = Path(a)
            i += 1
    return out if out["spec_path"] is not None else None


def call_run(kwargs: dict[str, Any]) -> NoReturn:
    """Run `zeus_run.cli.run.run_command` with ``kwargs`` and exit as typer would (its exit code)."""
    import typer

    from zeus_run.cli.run import run_command

    try:
        run_command(**kwargs)
    except typer.Exit as stop:
        raise SystemExit(stop.exit_code) from None
    except typer.Abort:
        raise SystemExit(1) from None
    raise SystemExit(0)
