"""The tests' shared builders: the one record factory (a valid `TrialRecord` with every field overridable) and the
one ``zeus-run`` command runner (`zeus_run_cli` in-process, `zeus_run_process` in a process of its own) and the
one spec builder (`job_spec`).

`make_record` builds a record by its place in the history; `record_for` builds the
record of an engine's request (what executors in the tests return).
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zeus_run.contract import StopReason
from zeus_run.engine.core import TrialRequest
from zeus_run.records import TrialRecord


def make_record(trial: int = 0, **fields: Any) -> TrialRecord:
    """Trial ``trial`` of a serial run: recurrence ``trial + 1``, first try, batch size 32, converged.

    Defaults: 3 epochs, 1.5 s, 150 J, 100 W max power, cost 150 J. ``reached`` defaults to
    whether the stop reason is ``target_reached``; ``stop_reason`` to ``target_reached`` when
    ``reached`` (default True) and ``max_epochs`` otherwise.
    """
    reached = fields.get("reached", fields.get("stop_reason", StopReason.TARGET_REACHED) == StopReason.TARGET_REACHED)
    base: dict[str, Any] = dict(
        job="j",
        recurrence=trial + 1,
        attempt=1,
        trial=trial,
        batch_size=32,
        stage="pruning",
        epochs=3,
        time=1.5,
        energy=150.0,
        max_power=100.0,
        cost=150.0,
        reached=reached,
        stop_reason=StopReason.TARGET_REACHED if reached else StopReason.MAX_EPOCHS,
    )
    base.update(fields)
    return TrialRecord(**base)


def record_for(req: TrialRequest, **fields: Any) -> TrialRecord:
    """The record of ``req``: its recurrence, try, trial, batch size, stage, detail and threshold, then ``fields``."""
    base: dict[str, Any] = dict(
        job="t",
        recurrence=req.recurrence,
        attempt=req.attempt,
        trial=req.trial,
        batch_size=req.decision.batch_size,
        stage=req.decision.stage,
        detail=req.decision.detail,
        cost_threshold=None if math.isinf(req.cost_threshold) else req.cost_threshold,
    )
    base.update(fields)
    return make_record(**base)


@dataclass(frozen=True)
class CliResult:
    """What a ``zeus-run`` command gave: its exit status and its output (the fields of `subprocess.CompletedProcess`
    the tests read)."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def zeus_run_cli(
    *args: str | os.PathLike[str],
    input: str | None = None,
    env: dict[str, str | None] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> CliResult:
    """``zeus-run ARGS`` in this process (`zeus_run.cli.main`, stdin, stdout and stderr captured): the tests' one
    CLI runner where no process behaviour is under test. ``env`` sets (or, with None, unsets) variables for the
    call; ``cwd``: the working directory during the call. The logging set-up the command makes is undone after it,
    as a process's end would.

    An exception that escapes the command is a traceback on stderr and exit 1, as Python's own exit would be.
    """
    from click.testing import CliRunner

    from zeus_run.cli import main

    argv = [os.fspath(a) for a in args]
    logger = logging.getLogger("zeus_run")
    kept = (list(logger.handlers), logger.level, logger.propagate)
    here = os.getcwd()
    with CliRunner().isolation(input=input, env=env) as (out, err, _):
        try:
            if cwd is not None:
                os.chdir(cwd)
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if isinstance(exc.code, str):
                sys.stderr.write(exc.code + "\n")
        except Exception:
            traceback.print_exc()
            code = 1
        finally:
            os.chdir(here)
            sys.stdout.flush()
            sys.stderr.flush()
            logger.handlers[:], logger.level, logger.propagate = kept[0], kept[1], kept[2]
        return CliResult(tuple(argv), code, out.getvalue().decode(), err.getvalue().decode())


def zeus_run_process(
    *args: str | os.PathLike[str],
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """``python -m zeus_run ARGS`` in a process of its own, for what is process behaviour (exit on a signal,
    buffering, a lock held across processes, the interpreter's start)."""
    return subprocess.run(
        [sys.executable, "-m", "zeus_run", *map(os.fspath, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


#: The tests' training script double (tests/scripts/fake_train.py): it reaches the target at the epoch ``--needs``
#: gives for its batch size.
FAKE_TRAIN = str(Path(__file__).resolve().parent / "scripts" / "fake_train.py")


def _yaml_value(value: Any) -> str:
    """A spec value as the tests write it: a string as given (raw YAML), a list in flow style (JSON, which YAML
    reads), a mapping in flow style with bare keys."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    return repr(value)


def job_spec(body: str = "", *, needs: str = "1:0,2:2,4:3", args: Sequence[str] = (), **fields: Any) -> str:
    """The tests' one spec builder: the YAML of a small job of `FAKE_TRAIN` (batch sizes 1, 2 and 4, default 2;
    2 reaches the target at epoch 2, 4 at epoch 3, 1 never), with ``fields`` set over the defaults (in their order,
    new ones after), ``needs`` (the script's ``--needs``: batch size:epoch it reaches the target at, 0 never) and
    ``args`` on its command line, and ``body`` (raw YAML) appended.

    A string value is written as given (raw YAML: ``energy="{source: nvml}"``); None is ``null``.
    """
    spec: dict[str, Any] = {
        "name": "t",
        "command": [sys.executable, FAKE_TRAIN, "--batch-size", "{batch_size}", "--needs", needs, *args],
        "batch_sizes": [1, 2, 4],
        "default_batch_size": 2,
        "target_metric": 0.9,
        "max_epochs": 5,
        "recurrences": 1,
        "energy": "{source: estimate, watts: 100, basis: wall-time}",
        "run_dir": "runs",
    }
    spec.update(fields)
    lines = "".join(f"{key}: {_yaml_value(value)}\n" for key, value in spec.items())
    return f"\n{lines}{body}\n"
