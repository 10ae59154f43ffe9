"""The names that cross the trial boundary: ``ZEUS_*`` variables (`Env`) and the files of a trial (`TrialFiles`)."""

from __future__ import annotations

import os

# -- environment and files ----------------------------------------------------------------


class Env:
    """Names of the ``ZEUS_*`` variables the launcher sets for the script (see `zeus_run.train`)."""

    BATCH_SIZE = "ZEUS_BATCH_SIZE"
    LEARNING_RATE = "ZEUS_LEARNING_RATE"
    SEED = "ZEUS_SEED"
    TARGET_METRIC = "ZEUS_TARGET_METRIC"
    HIGHER_IS_BETTER = "ZEUS_HIGHER_IS_BETTER"
    MAX_EPOCHS = "ZEUS_MAX_EPOCHS"
    ETA_KNOB = "ZEUS_ETA_KNOB"
    COST_THRESH = "ZEUS_COST_THRESH"
    #: ``1`` when the trial may also be stopped by its learning curve (`zeus_run.trial.stop.StopRule.curve_stop`).
    CURVE_STOP = "ZEUS_CURVE_STOP"
    LOG_DIR = "ZEUS_LOG_DIR"
    JOB_ID = "ZEUS_JOB_ID"
    RECURRENCE = "ZEUS_RECURRENCE"
    TRY = "ZEUS_TRY"
    EVENT_LOG = "ZEUS_EVENT_LOG"
    STOP_FILE = "ZEUS_STOP_FILE"
    #: The metric's name in a framework's logs (spec ``metric.name``; the framework callbacks read it).
    METRIC_NAME = "ZEUS_METRIC_NAME"
    #: The spec's ``energy`` section as JSON: how a script that no launcher watches measures itself
    #: (`zeus_run.train.Trial`, through `zeus_run.energy.SelfMeter`), so every door measures alike.
    ENERGY = "ZEUS_ENERGY"
    #: The spec's ``timeout`` (unit: s; empty: none), for the stop rule on the training side.
    TIMEOUT = "ZEUS_TIMEOUT"
    PROFILE = "ZEUS_PROFILE"
    PROFILE_STOP = "ZEUS_PROFILE_STOP"
    #: The trial's process marker (`zeus_run.trial.proctree`): every process of the trial carries it.
    TRIAL_TOKEN = "ZEUS_TRIAL_TOKEN"
    #: Ask/tell: the run directory and the ask's token (what `zeus-run tell` and `zeus-run exec` need).
    RUN_DIR = "ZEUS_RUN_DIR"
    ASK_TOKEN = "ZEUS_ASK_TOKEN"
    #: Ask/tell: the file whose rewriting renews the ask's lease, and the lease (unit: s).
    HEARTBEAT = "ZEUS_HEARTBEAT"
    #: The energy counter as ``zeus-run ask`` read it (JSON: ``at``, ``energy``, ``source``, ``host``, ``gpus``):
    #: a script on the same host measures its start-up from it (`zeus_run.energy.SelfMeter`).
    ASK_ENERGY = "ZEUS_ASK_ENERGY"
    LEASE = "ZEUS_LEASE"
    #: The batch-size server (``zeus-run serve``) a training pod talks to, e.g. ``http://zeus:7787``
    #: (`zeus_run.remote`); with it the `zeus_run.train.Trial` helper asks the server for its trial.
    SERVER = "ZEUS_SERVER"
    #: The server's bearer token, or (``SERVER_TOKEN_FILE``) a file holding it, e.g. a mounted secret.
    SERVER_TOKEN = "ZEUS_SERVER_TOKEN"
    SERVER_TOKEN_FILE = "ZEUS_SERVER_TOKEN_FILE"
    #: The job's name on the server (a run directory under the server's ``--root``).
    SERVER_JOB = "ZEUS_SERVER_JOB"
    #: The server's trial token of an ask made outside the script (``zeus-run ask`` against a server).
    SERVER_TRIAL = "ZEUS_SERVER_TRIAL"
    #: A job spec file the `zeus_run.train.Trial` helper registers before it asks (the same spec
    #: again is a no-op), as the seeds' client registers its job.
    SERVER_SPEC = "ZEUS_SERVER_SPEC"
    #: How long a request keeps retrying a server it cannot reach (unit: s; default 120).
    SERVER_TIMEOUT = "ZEUS_SERVER_TIMEOUT"

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every variable of the contract (a launcher inside a trial does not pass its own on)."""
        return tuple(v for k, v in vars(cls).items() if k.isupper())


class TrialFiles:
    """Names of the files in a trial's directory (``trials/rNNNN-tNN/``)."""

    #: The script's stdout and stderr (and, under Slurm, the agent's own log).
    OUTPUT = "output.log"
    #: Written by the output's relay only once the launcher is gone: where ``output.log`` stood and when (the
    #: first line: the trial's start; then one line per chunk), so an orphan's epochs read from its output have
    #: times (`zeus_run.trial.output`, `zeus_run.trial.orphan`).
    OUTPUT_TIMES = "output.times"
    #: The script's JSON-lines event log (``ZEUS_EVENT_LOG``).
    EVENTS = "events.jsonl"
    #: Created to ask the script to stop (``ZEUS_STOP_FILE``).
    STOP = "stop"
    #: Created when power-limit profiling ends (``ZEUS_PROFILE_STOP``).
    PROFILE_DONE = "profile_done"
    #: The agent's plan (`zeus_run.trial.agent.AgentPlan`).
    PLAN = "plan.json"
    #: Rewritten by a separate agent while it lives.
    HEARTBEAT = "heartbeat"
    #: Written once by a separate agent: where it runs and how it measures.
    AGENT = "agent.json"
    #: One JSON line per counted epoch (the agent's).
    EPOCHS = "epochs.jsonl"
    #: The `TrialOutcome`, written atomically when the trial is over.
    OUTCOME = "outcome.json"
    #: Written when a later launcher stopped the processes a dead launcher's trial left running: the Unix time it
    #: did (where the trial's span ends: `zeus_run.engine.record.interrupted_record`).
    KILLED = "killed_at"

    #: Files zeus-run writes where the script may have planted links (``events.jsonl`` is the script's own).
    WRITTEN = (OUTPUT, OUTPUT_TIMES, STOP, PROFILE_DONE)
    #: Files an earlier job of the same trial directory may have left (removed before a new submission).
    AGENT_FILES = (OUTCOME, HEARTBEAT, AGENT, EPOCHS)

    @staticmethod
    def dir_name(recurrence: int, attempt: int) -> str:
        """The trial directory's name, e.g. ``r0003-t01``."""
        return f"r{recurrence:04d}-t{attempt:02d}"


#: ``running.json``: the trials in flight (a crash marker), at the top of the run directory.
RUNNING_NAME = "running.json"


def env_float(name: str, default: float | None) -> float | None:
    """The environment variable ``name`` as a float (``default`` when unset or blank)."""
    raw = os.environ.get(name, "")
    return float(raw) if raw.strip() else default


def env_int(name: str, default: int) -> int:
    """The environment variable ``name`` as an int (``default`` when unset or blank)."""
    raw = os.environ.get(name, "")
    return int(raw) if raw.strip() else default
