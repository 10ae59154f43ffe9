"""``zeus-run exec``: run an unmodified command as an ask's trial, under the trial agent, then tell.

The agent (`zeus_run.trial.agent.run_plan`) is the one Slurm runs on a node: it
starts the command in its own session, measures energy here (NVML on this
node's GPUs, or the labelled estimate), reads epochs from the event log or the
spec's regex, enforces the stop rules (target, ``max_epochs``, the ask's cost
threshold) and writes ``outcome.json``; its heartbeat renews the ask's lease.
The tell that follows records the trial from that outcome.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from zeus_run.asktell._ask import ask
from zeus_run.asktell._tell import heartbeat, tell
from zeus_run.contract import Env, StopReason, TrialFiles
from zeus_run.errors import RECURRENCE_FAILED_EXIT_CODE, UsageError
from zeus_run.records import TrialRecord
from zeus_run.rundir.store import read_running
from zeus_run.trial.agent import AgentPlan, run_plan
from zeus_run.trial.burst import BurstWarning
from zeus_run.trial.run import TrialListener

#: ``zeus-run exec``'s exit codes besides 3 (lease expired) and 75 (busy).
EXEC_REACHED = 0
EXEC_NO_MODEL = 1
#: A usage error, or a trial that failed because of the spec or its environment (``config_error``,
#: ``environment_error``: not the batch size's fault), as ``zeus-run run`` exits.
EXEC_SPEC_OR_ENVIRONMENT = 2
EXEC_INTERRUPTED = 130


@dataclass(frozen=True)
class Target:
    """The ask an ``exec`` runs: its run directory and token."""

    run_dir: Path
    token: str


def target_of(
    job: str | Path | None, run_dir: str | Path | None, token: str | None, env: dict[str, str] | None = None
) -> Target:
    """The ask to run: a new one of ``job``, the one ``run_dir``/``token`` name, or the one the environment names.

    Raises:
        UsageError: None is named, or only half of one.
    """
    environ = os.environ if env is None else env
    if job is not None:
        a = ask(job, run_dir=run_dir)
        return Target(a.run_dir, a.token)
    rd = run_dir if run_dir is not None else environ.get(Env.RUN_DIR)
    tok = token if token is not None else environ.get(Env.ASK_TOKEN)
    if not rd or not tok:
        missing = "token" if rd else "run_dir"
        raise UsageError(
            f'{missing} = (missing): exec needs an ask. Run it after `eval "$(zeus-run ask JOB.yaml --format env)"` '
            "(which sets ZEUS_RUN_DIR and ZEUS_ASK_TOKEN), pass --run-dir and --token, or pass --job JOB.yaml to ask first."
        )
    return Target(Path(rd), tok)


def run_ask(
    target: Target,
    command: list[str] | None = None,
    listener: TrialListener | None = None,
    cancel: threading.Event | None = None,
) -> TrialRecord:
    """Run the ask's trial under the agent, here, and tell it.

    Args:
        target: The ask.
        command: The command to run (None or empty: the spec's command as the ask filled it in).
        listener: Receives the command's output lines and each counted epoch.
        cancel: Set it to stop the trial (recorded as interrupted).

    Raises:
        LeaseExpired: The lease had expired before the trial started, or before it was told.
        UnknownToken: No such ask in flight.
    """
    heartbeat(target.run_dir, target.token)  # refuses an expired or unknown ask before anything runs
    marker = next(m for m in read_running(target.run_dir) or [] if m.asked and m.token == target.token)
    tdir = Path(marker.trial_dir or "")
    try:
        plan = AgentPlan.from_json(json.loads((tdir / TrialFiles.PLAN).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise UsageError(
            f"plan = {str(tdir / TrialFiles.PLAN)!r}: cannot read the ask's plan ({exc}). The run directory must be "
            "the one the ask wrote (on a filesystem this host shares); ask again."
        ) from None
    if command:
        plan = dataclasses.replace(plan, trial=dataclasses.replace(plan.trial, argv=tuple(command), shell=False))
    status = run_plan(plan, cancel, listener)
    record = tell(target.run_dir, target.token, message=None if status == 0 else f"the agent exited with {status}")
    BurstWarning().check(record)  # an exec is one trial: once per run
    return record


def exit_code_of(record: TrialRecord) -> int:
    """``zeus-run exec``'s exit code: 0 a model (target reached), 2 a spec or environment error (as ``zeus-run run``
    exits on one), 130 interrupted, 5 the recurrence failed (this was its last try:
    `zeus_run.errors.RECURRENCE_FAILED_EXIT_CODE`), else 1."""
    if record.reached:
        return EXEC_REACHED
    if record.stop_reason in (StopReason.CONFIG_ERROR, StopReason.ENVIRONMENT_ERROR):
        return EXEC_SPEC_OR_ENVIRONMENT
    if record.stop_reason is StopReason.INTERRUPTED:
        return EXEC_INTERRUPTED
    if record.recurrence_failed is not None:
        return RECURRENCE_FAILED_EXIT_CODE
    return EXEC_NO_MODEL
