"""``zeus-run run`` read without typer's parser (`zeus_run.cli._fastrun`) reads every form as typer does, and leaves
to typer every form it does not read."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.main

from zeus_run.cli import _bare_next
from zeus_run.cli._app import app
from zeus_run.cli._fastrun import run_kwargs


def _typer_reads(args: list[str]) -> dict:
    """The keyword arguments typer passes to ``run_command`` for ``zeus-run run ARGS``."""
    group = typer.main.get_command(app)
    root = group.make_context("zeus-run", ["run"])
    command = group.get_command(root, "run")
    return dict(command.make_context("run", _bare_next(list(args)), parent=root).params)


READ = [
    ["job.yaml"],
    ["job.yaml", "--next"],
    ["job.yaml", "--next", "-q"],
    ["job.yaml", "--next", "3", "--quiet"],
    ["--next", "job.yaml"],
    ["--next", "2", "runs/demo", "--no-output"],
    ["job.yaml", "-n", "5", "--no-output", "-v"],
    ["job.yaml", "--recurrences", "2", "--recurrences", "7"],
    ["job.yaml", "-d", "runs/x", "--new", "--force", "--verbose"],
    ["job.yaml", "--run-dir", "elsewhere", "--warm-from", "../a100/runs", "-q", "--next"],
]


@pytest.mark.parametrize("args", READ, ids=" ".join)
def test_each_form_reads_as_typer_reads_it(args):
    ours = run_kwargs(args)
    assert ours is not None, args
    assert ours == _typer_reads(args)
    assert isinstance(ours["spec_path"], Path)


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["job.yaml", "--help"],
        ["job.yaml", "--next", "0"],
        ["job.yaml", "-n", "0"],
        ["job.yaml", "-n", "x"],
        ["job.yaml", "-n"],
        ["job.yaml", "-d", "--next"],
        ["a.yaml", "b.yaml"],
        ["job.yaml", "--bogus"],
        ["--next=2", "job.yaml"],
        ["-qv", "job.yaml"],
        ["job.yaml", "--", "x"],
    ],
    ids=lambda a: " ".join(a) or "nothing",
)
def test_a_form_it_does_not_read_goes_to_typer(args):
    assert run_kwargs(args) is None
