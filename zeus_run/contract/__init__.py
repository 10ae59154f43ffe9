"""The trial contract: what the launcher, the agent, the executors and the training script share.

One package for everything that crosses the trial boundary, so that a new stop
reason, a ``running.json`` field, a ``ZEUS_*`` variable or a trial file is a
change in one place:

* `StopReason`: why a trial ended, with its behaviour (observed by the
  optimizer, a finishing stop, judged by the launcher, an early stop, a
  failure, an infrastructure failure). A new reason is one member.
* `Env`: the ``ZEUS_*`` environment variables of the launcher-script contract
  (`zeus_run.train` reads them; `zeus_run.executors` writes them).
* `TrialFiles`: the names of the files in a trial's directory.
* `TrialPlan` and `TrialOutcome`: a trial in and out (plain data, JSON both ways).
* `RunningMarker`: one trial in flight as ``running.json`` records it, validated
  on read (the file is untrusted: a person or a crash may have damaged it).
* `exit_watch`: how a script that reports its own end (no launcher watches it) is ending: its exit
  code and its last output.
* `expires_at`, `has_expired`: an ask's lease, from its marker and its trial's files.
* `crash_cause`: the one-line cause of a failed trial, stored as a field
  (``TrialOutcome.cause``) rather than parsed back out of message text.

Standard library only: `zeus_run.train` (imported by training scripts) imports
nothing else from zeus-run.
"""

from __future__ import annotations

from zeus_run.contract._exit import ExitWatch, ScriptEnd, exit_status, exit_watch, watch_exit
from zeus_run.contract._heartbeat import heartbeat_time, write_heartbeat
from zeus_run.contract._lease import expires_at, has_expired, last_sign_of_life
from zeus_run.contract._marker import ASK_EXECUTOR, RunningMarker, markers_from_json, markers_to_json
from zeus_run.contract._names import RUNNING_NAME, Env, TrialFiles, env_float, env_int
from zeus_run.contract._process import have_proc, iso_seconds, process_start_time
from zeus_run.contract._reasons import STOP_REASONS, StopReason
from zeus_run.contract._trial import (
    BURST_TIMING,
    STDOUT_MODES,
    TrialOutcome,
    TrialPlan,
    crash_cause,
    exit_text,
    reaches_target,
)

__all__ = [
    "ASK_EXECUTOR",
    "BURST_TIMING",
    "RUNNING_NAME",
    "STDOUT_MODES",
    "STOP_REASONS",
    "Env",
    "ExitWatch",
    "RunningMarker",
    "ScriptEnd",
    "StopReason",
    "TrialFiles",
    "TrialOutcome",
    "TrialPlan",
    "crash_cause",
    "env_float",
    "env_int",
    "exit_status",
    "exit_text",
    "exit_watch",
    "expires_at",
    "has_expired",
    "have_proc",
    "heartbeat_time",
    "iso_seconds",
    "last_sign_of_life",
    "markers_from_json",
    "markers_to_json",
    "process_start_time",
    "reaches_target",
    "watch_exit",
    "write_heartbeat",
]
