"""The trial agent: runs one trial next to its training script and leaves the outcome in the trial's directory.

    python -m zeus_run.trial.agent PLAN.json

The agent does, where the trial runs, everything `zeus_run.trial.run` does: it
starts the command in its own session, measures energy, reads epochs from the
event log or the regex, and enforces the stop rules and the cost threshold
locally, so no decision waits on a round trip to the launcher. The local
executor runs the same code in the launcher's process (`run_agent`); a remote
executor (Slurm) starts this module on the node that runs the trial.

Files in the trial's directory (``AgentPlan.dir``):

==============  ===================================================================
``plan.json``   the `AgentPlan` (written by the launcher)
``agent.json``  written once when a separate agent has opened its energy source:
                ``{"pid", "host", "energy": {"name", "estimated", "method", "max_power",
                "describe", "devices"}, "cuda_visible_devices", "slurm_job_id"}``
``heartbeat``   rewritten every `HEARTBEAT_INTERVAL` seconds, by a thread of its own,
                from the agent's start to its exit (the stop protocol included):
                ``{"pid", "host", "time"}`` (a launcher that sees it stop changing
                knows the agent is gone, or cannot write where the launcher reads)
``epochs.jsonl``  one JSON line per counted epoch: ``epoch``, ``metric``, ``time`` (s),
                ``energy`` (J), ``cost`` (J) since the trial started
``outcome.json``  `zeus_run.trial.run.TrialOutcome` as JSON, written atomically when the
                trial is over: its presence means the trial is done
==============  ===================================================================

Exit status of ``python -m zeus_run.trial.agent``: 0 when the outcome was written,
2 when the plan cannot be read, 3 when the command could not be started (the
reason is on stderr and in ``outcome.json``'s ``message``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zeus_run import _fs
from zeus_run.contract import StopReason, TrialFiles, TrialOutcome, TrialPlan, write_heartbeat
from zeus_run.energy import EnergySource
from zeus_run.errors import LaunchError, ZeusRunError
from zeus_run.trial.run import NullListener, TrialListener, TrialProfiler, run_trial

logger = logging.getLogger(__name__)

PLAN_NAME = TrialFiles.PLAN
HEARTBEAT_NAME = TrialFiles.HEARTBEAT
AGENT_NAME = TrialFiles.AGENT
EPOCHS_NAME = TrialFiles.EPOCHS
OUTCOME_NAME = TrialFiles.OUTCOME

#: Seconds between two heartbeats (at most).
HEARTBEAT_INTERVAL = 1.0


@dataclass(frozen=True)
class AgentPlan:
    """What an agent needs to run one trial (plain data).

    Attributes:
        trial: The trial itself.
        dir: The trial's directory in the run directory (must be shared with the launcher).
        energy: How to open the energy source when the agent runs as its own process:
            `zeus_run.spec.EnergySettings` fields (None: the defaults).
        power: Power limits the agent sets on its own node's GPUs (`zeus_run.power.node_power_plan`;
            None: none).
    """

    trial: TrialPlan
    dir: Path
    energy: Mapping[str, Any] | None = None
    power: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"trial": self.trial.to_json(), "dir": str(self.dir), "energy": dict(self.energy or {}) or None}
        if self.power is not None:
            out["power"] = dict(self.power)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AgentPlan:
        return cls(TrialPlan.from_json(data["trial"]), Path(data["dir"]), data.get("energy"), data.get("power"))

    def profiling(self) -> AgentPlan:
        """This plan with power-limit profiling on (the script reports its steps; ``ZEUS_PROFILE``)."""
        stop = self.dir / "profile_done"
        env = {**self.trial.env, "ZEUS_PROFILE": "1", "ZEUS_PROFILE_STOP": str(stop)}
        return dataclasses.replace(self, trial=dataclasses.replace(self.trial, env=env, profile_stop_path=stop))

    def write(self) -> Path:
        """Write ``plan.json`` into the trial's directory (atomically); returns its path."""
        path = self.dir / PLAN_NAME
        _atomic_write(path, json.dumps(self.to_json(), indent=1) + "\n")
        return path


def run_agent(
    plan: AgentPlan,
    energy: EnergySource,
    listener: TrialListener | None = None,
    cancel: threading.Event | None = None,
    profiler: TrialProfiler | None = None,
    heartbeat: bool = True,
) -> TrialOutcome:
    """Run the trial, keeping the heartbeat, the per-epoch file and the outcome in its directory.

    Args:
        plan: The trial and its directory.
        energy: Source of energy readings.
        listener: Receives output lines and epoch progress.
        cancel: When set, the trial is stopped promptly and reported as ``interrupted``.
        profiler: Power-limit profiler (see `zeus_run.trial.run.run_trial`).
        heartbeat: Keep the ``heartbeat`` file (an agent in the launcher's own process needs none).

    Raises:
        LaunchError: The command could not be started (no outcome is written).
    """
    with contextlib.suppress(OSError):
        for name in {OUTCOME_NAME, EPOCHS_NAME} & set(os.listdir(plan.dir)):  # left by an earlier attempt
            os.remove(plan.dir / name)
    tee = _AgentListener(listener or NullListener(), plan.dir, heartbeat)
    try:
        outcome = run_trial(plan.trial, energy, tee, cancel, profiler)
    finally:
        tee.close()
    # In the launcher's process the history record is the durable copy; a separate agent fsyncs.
    write_outcome(plan.dir, outcome, durable=heartbeat)
    return outcome


def _run_with_power(
    plan: AgentPlan, energy: EnergySource, cancel: threading.Event, listener: TrialListener | None = None
) -> None:
    """Run the trial; with ``plan.power``, set, profile and restore this node's GPUs' limits around it."""
    from zeus_run.power import open_node_power

    power = open_node_power(plan.power, energy) if plan.power is not None else None
    if power is None:
        run_agent(plan, energy, listener, cancel=cancel)
        return
    batch_size = int(plan.power["batch_size"]) if plan.power else 0
    profiler = power.profiler_for(batch_size)
    if profiler is not None and not profiler.done:
        plan = plan.profiling()
    try:
        run_agent(plan, energy, listener, cancel=cancel, profiler=profiler)
    finally:
        power.controller.restore()  # this node's GPUs' original limits and persistence mode
    if profiler is not None:
        power.trial_done(batch_size, profiler)


def write_outcome(trial_dir: Path, outcome: TrialOutcome, durable: bool = True) -> None:
    """Write ``outcome.json`` atomically. A failure to write (disk full) is logged, not raised."""
    try:
        _atomic_write(trial_dir / OUTCOME_NAME, json.dumps(outcome.to_json(), allow_nan=False) + "\n", durable)
    except (OSError, ValueError) as exc:
        logger.warning("could not write %s: %s", trial_dir / OUTCOME_NAME, exc)


def read_outcome(trial_dir: Path) -> TrialOutcome | None:
    """The outcome an agent left in ``trial_dir``, or None if there is none (yet) or it is unreadable."""
    try:
        data = json.loads((trial_dir / OUTCOME_NAME).read_text(encoding="utf-8"))
        return TrialOutcome.from_json(data)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def heartbeat_age(trial_dir: Path) -> float | None:
    """Seconds since the agent's last heartbeat, or None if it never wrote one."""
    try:
        return max(time.time() - (trial_dir / HEARTBEAT_NAME).stat().st_mtime, 0.0)
    except OSError:
        return None


class _AgentListener:
    """Passes progress on, and keeps the per-epoch file and the heartbeat."""

    def __init__(self, inner: TrialListener, trial_dir: Path, heartbeat: bool = True) -> None:
        self.inner = inner
        self.dir = trial_dir
        self._epochs: Any = None
        try:
            fd = _fs.open_fd(trial_dir / EPOCHS_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # 0644 whatever the umask
            self._epochs = os.fdopen(fd, "a", encoding="utf-8")  # closed in close()
        except OSError as exc:
            logger.warning("cannot write %s (%s); per-epoch measurements are not kept", trial_dir / EPOCHS_NAME, exc)
        # NOTE: a thread, not the trial's ticks: the trial stops calling back while it
        # waits for a script to finish after the target (up to stop.grace), and the
        # launcher must not take that for a dead agent.
        self._stop = threading.Event()
        self._beater: threading.Thread | None = None
        if heartbeat:
            self._heartbeat()
            self._beater = threading.Thread(target=self._beat_loop, name="zeus-run heartbeat", daemon=True)
            self._beater.start()

    def on_output(self, line: str) -> None:
        self.inner.on_output(line)

    def on_epoch(self, epoch: int, metric: float, time: float, energy: float, cost: float) -> None:
        self.inner.on_epoch(epoch, metric, time, energy, cost)
        if self._epochs is not None:
            try:
                row = {"epoch": epoch, "metric": metric, "time": time, "energy": energy, "cost": cost}
                self._epochs.write(json.dumps(row) + "\n")
                self._epochs.flush()
            except (OSError, ValueError):
                pass

    def on_tick(self, time: float, energy: float, cost: float) -> None:
        self.inner.on_tick(time, energy, cost)

    def _beat_loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_INTERVAL):
            self._heartbeat()

    def _heartbeat(self) -> None:
        with contextlib.suppress(OSError):
            write_heartbeat(self.dir / HEARTBEAT_NAME)

    def close(self) -> None:
        self._stop.set()
        if self._beater is not None:
            self._beater.join()
            self._beater = None
        if self._epochs is not None:
            with contextlib.suppress(OSError):
                self._epochs.close()
            self._epochs = None


def write_agent_info(trial_dir: Path, energy: EnergySource) -> None:
    """Write ``agent.json``: where the agent runs and what it measures (a failure is logged)."""
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "energy": {
            "name": energy.name,
            "estimated": energy.estimated,
            "method": energy.method,
            "max_power": energy.max_power,
            "describe": energy.describe(),
            "devices": energy.devices(),
        },
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }
    try:
        _atomic_write(trial_dir / AGENT_NAME, json.dumps(info) + "\n", durable=False)
    except (OSError, ValueError) as exc:
        logger.warning("could not write %s: %s", trial_dir / AGENT_NAME, exc)


def read_agent_info(trial_dir: Path) -> dict[str, Any] | None:
    """The ``agent.json`` an agent left in ``trial_dir``, or None."""
    try:
        data = json.loads((trial_dir / AGENT_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _atomic_write(path: Path, text: str, durable: bool = True) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.remove(tmp)  # left by a killed writer with the same pid
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


@contextlib.contextmanager
def _signals_to(cancel: threading.Event) -> Iterator[None]:
    def handler(_signum: int, _frame: object) -> None:
        cancel.set()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def main(argv: list[str] | None = None) -> int:
    """``python -m zeus_run.trial.agent PLAN.json``."""
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="zeus-run agent: %(message)s")
    if len(args) != 1:
        print("usage: python -m zeus_run.trial.agent PLAN.json", file=sys.stderr)
        return 2
    try:
        plan = AgentPlan.from_json(json.loads(Path(args[0]).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        print(f"zeus-run agent: cannot read the plan {args[0]!r}: {exc}", file=sys.stderr)
        return 2
    return run_plan(plan)


def run_plan(plan: AgentPlan, cancel: threading.Event | None = None, listener: TrialListener | None = None) -> int:
    """Run a plan as a separate agent: open its energy source, run the trial, write ``outcome.json``.

    SIGINT, SIGTERM and SIGHUP stop the trial (recorded as interrupted). Returns the agent's
    exit status (see the module docstring). `zeus-run exec` runs an ask's plan through here.
    """
    from zeus_run.energy import open_energy_source
    from zeus_run.spec import EnergySettings

    cancel = cancel or threading.Event()
    fields = {f.name for f in dataclasses.fields(EnergySettings)}
    settings = {k: v for k, v in (plan.energy or {}).items() if k in fields}
    for key in ("gpus", "include"):
        if settings.get(key) is not None:
            settings[key] = tuple(settings[key])
    try:
        with _signals_to(cancel), open_energy_source(EnergySettings(**settings)) as energy:
            write_agent_info(plan.dir, energy)
            _run_with_power(plan, energy, cancel, listener)
    except LaunchError as exc:
        print(f"zeus-run agent: {exc}", file=sys.stderr)
        write_outcome(
            plan.dir,
            TrialOutcome.of(StopReason.CRASHED, max_power=0.0, message=str(exc), cause=str(exc)),
        )
        return 3
    except ZeusRunError as exc:
        print(f"zeus-run agent: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
