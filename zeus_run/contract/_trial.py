"""A trial in and out (`TrialPlan`, `TrialOutcome`), the target (`reaches_target`), and the one-line cause of a
failure (`crash_cause`)."""

from __future__ import annotations

import dataclasses
import math
import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import EllipsisType
from typing import Any

from zeus_run.contract._reasons import StopReason

#: Where a trial's stdout and stderr go (`TrialPlan.stdout`, the spec's ``stdout``).
STDOUT_MODES = ("pipe", "pty")
#: ``epoch_timing`` of a trial whose epochs all arrived at once at its exit (`zeus_run.trial.burst`).
BURST_TIMING = "burst"

# -- the target ------------------------------------------------------------------------------


def reaches_target(metric: float, target: float | None, higher_is_better: bool) -> bool:
    """Whether ``metric`` reaches ``target``: the one "converged" predicate of every door.

    The launcher's trial runner, ``tell``, the training-side helper (`zeus_run.train`), resume's
    history check and replay's recorded paths all ask this. A NaN (a diverged epoch) or infinite
    metric never converges; no target (None) is never reached.
    """
    if target is None or not math.isfinite(metric):
        return False
    return metric >= target if higher_is_better else metric <= target


# -- a trial in and out ---------------------------------------------------------------------


@dataclass(frozen=True)
class TrialPlan:
    """Everything needed to launch, judge and stop one trial (plain data).

    Attributes:
        argv: Command (placeholders already substituted); one string when ``shell``.
        workdir: Working directory.
        env: Variables added to the launcher's environment (``ZEUS_*``, the spec's ``env``).
        log_path: File that receives the script's stdout and stderr.
        event_path: JSON-lines event log (``ZEUS_EVENT_LOG``).
        stop_path: File created to ask the script to stop (``ZEUS_STOP_FILE``).
        max_epochs: Epoch limit.
        target_metric: Converged when the metric reaches this.
        higher_is_better: Direction of the metric.
        metric_regex: Regex read from the output (or from ``metric_path``), or None to read the event log.
        metric_key: ``jsonl`` source: the key of the metric in each JSON object line (of the output,
            or of ``metric_path``).
        metric_path: ``file`` source (or ``jsonl`` with a path): the file the script appends its
            metric to; only lines added after the trial starts are read.
        eta: Cost knob.
        cost_threshold: Stop once the cost would exceed this (unit: J; inf: never).
        timeout: Wall-clock limit (unit: s), or None. Holds through every grace period.
        shell: Run through ``/bin/sh -c``.
        stop_grace: Seconds the script may take to exit by itself after the target or
            ``max_epochs`` (None: for ever).
        term_grace: Seconds between the stop file and SIGTERM on a prompt stop.
        kill_grace: Seconds between SIGTERM and SIGKILL.
        on_target: Regex mode: ``stop`` (prompt stop at the target) or ``wait``.
        token: The trial's process marker (``ZEUS_TRIAL_TOKEN``); empty: none.
        profile_stop_path: Created when power-limit profiling ends (``ZEUS_PROFILE_STOP``), if profiling.
        stdout: Where the script's stdout and stderr go: ``pipe``, or ``pty`` (a pseudo-terminal,
            for programs that buffer their output when it is not a terminal; `zeus_run.trial.output`).
        curve_stop: Also stop the trial once its learning curve cannot reach the target in time
            (`zeus_run.optimizer.early_stop.cannot_reach`).
    """

    argv: tuple[str, ...]
    workdir: Path
    env: Mapping[str, str]
    log_path: Path
    event_path: Path
    stop_path: Path
    max_epochs: int
    target_metric: float
    higher_is_better: bool = True
    metric_regex: str | None = None
    metric_key: str | None = None
    metric_path: Path | None = None
    eta: float = 0.5
    cost_threshold: float = math.inf
    timeout: float | None = None
    shell: bool = False
    stop_grace: float | None = 300.0
    term_grace: float = 2.0
    kill_grace: float = 10.0
    on_target: str = "stop"
    token: str = ""
    profile_stop_path: Path | None = None
    stdout: str = "pipe"
    curve_stop: bool = False

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (paths as strings, an infinite threshold as None)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Path):
                v = str(v)
            elif isinstance(v, tuple):
                v = list(v)
            elif isinstance(v, Mapping):
                v = dict(v)
            out[f.name] = v
        if not math.isfinite(self.cost_threshold):
            out["cost_threshold"] = None
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialPlan:
        """The inverse of `to_json`."""
        d = dict(data)
        for key in ("workdir", "log_path", "event_path", "stop_path", "profile_stop_path", "metric_path"):
            if d.get(key) is not None:
                d[key] = Path(d[key])
        d["argv"] = tuple(d["argv"])
        d["env"] = {str(k): str(v) for k, v in d.get("env", {}).items()}
        if d.get("cost_threshold") is None:
            d["cost_threshold"] = math.inf
        return cls(**d)

    @property
    def prompt_on_target(self) -> bool:
        """Whether the target and ``max_epochs`` stop the script promptly (a metric read without the
        event log, by regex, JSON lines or a file: the script does not know the target; ``on_target: stop``)."""
        return self.reads_output_metric and self.on_target == "stop"

    @property
    def reads_output_metric(self) -> bool:
        """Whether the metric comes from the script's output or a metric file, not from the event log."""
        return self.metric_regex is not None or self.metric_key is not None or self.metric_path is not None


@dataclass(frozen=True)
class TrialOutcome:
    """What happened. Time, energy and cost count up to the point the trial was judged at.

    Attributes:
        epochs: Epochs counted.
        time: Unit: s.
        energy: Unit: J.
        max_power: Unit: W.
        cost: Unit: J.
        reached: Target reached.
        stop_reason: A `StopReason`.
        exit_code: The script's own exit code (negative: ended by that signal), None if it never ran.
        ended: ``exited`` (by itself), ``sigterm`` or ``killed``; None if it never ran.
        after_time: Time from the decision to stop to the script's exit (unit: s), None without a decision.
        after_energy: Energy in that time (unit: J), None without a decision.
        metrics: Metric after each counted epoch.
        after_metrics: Metrics read after the stop decision, while the script finished (not
            counted; evidence that the metric is readable). None: none.
        message: Explanation for failures (log tail) and notes.
        malformed: Malformed event or output lines ignored.
        power_limit: GPU power limit chosen for this trial (unit: W), None if none was.
        cause: One line naming why a failed trial failed (`crash_cause`), None if it did not fail.
        epoch_timing: `BURST_TIMING` when every epoch's metric arrived at once at the script's exit
            (its output was held in a buffer: `zeus_run.trial.burst`); None: timed as read.
        profile_overhead: What the power-limit sweep in this trial cost beyond the same work at the
            chosen limit (unit: J of cost; `zeus_run.power.JitProfiler.overhead`); None: no sweep ended
            in this trial.
    """

    epochs: int
    time: float
    energy: float
    max_power: float
    cost: float
    reached: bool
    stop_reason: StopReason
    exit_code: int | None
    ended: str | None = None
    after_time: float | None = None
    after_energy: float | None = None
    metrics: tuple[float, ...] = ()
    message: str | None = None
    malformed: int = 0
    power_limit: float | None = None
    cause: str | None = None
    epoch_timing: str | None = None
    after_metrics: tuple[float, ...] | None = None
    profile_overhead: float | None = None

    @classmethod
    def of(
        cls,
        stop_reason: StopReason,
        *,
        max_power: float,
        epochs: int = 0,
        time: float = 0.0,
        energy: float = 0.0,
        eta: float | None = None,
        cost: float | None = None,
        reached: bool | None = None,
        exit_code: int | None = None,
        message: str | None = None,
        cause: str | EllipsisType | None = ...,
        **rest: Any,
    ) -> TrialOutcome:
        """The one builder of a trial's outcome, whatever the door (the launcher's watch, the agent, Slurm, a tell,
        a trial taken over or left by a dead launcher, the simulator, replay).

        Args:
            stop_reason: Why it ended.
            max_power: The GPUs' maximum power (unit: W).
            epochs: Epochs counted.
            time: Time charged (unit: s).
            energy: Energy charged (unit: J).
            eta: The job's ``eta``: the cost is the Zeus cost of ``energy`` and ``time`` (`zeus_run.cost.zeus_cost`).
            cost: The cost as the door's meter charged it (unit: J), instead of ``eta``; neither: 0.
            reached: Whether the target was reached; None: whether ``stop_reason`` says so.
            exit_code: The script's exit code; None if it never ran.
            message: Explanation for failures and notes.
            cause: One line naming why it failed; left out: `crash_cause` of ``message``.
            rest: Any other `TrialOutcome` field (``metrics``, ``after_time`` ...).
        """
        if cost is None:
            if eta is None:
                cost = 0.0
            else:
                from zeus_run.cost import zeus_cost  # standard library only, as this module

                cost = zeus_cost(energy, time, eta, max_power)
        return cls(
            epochs=epochs,
            time=time,
            energy=energy,
            max_power=max_power,
            cost=cost,
            reached=stop_reason is StopReason.TARGET_REACHED if reached is None else reached,
            stop_reason=stop_reason,
            exit_code=exit_code,
            message=message,
            cause=crash_cause(stop_reason, message, exit_code) if isinstance(cause, EllipsisType) else cause,
            **rest,
        )

    #: The outcome's fields a history record carries as they are (`record_fields`).
    RECORDED = (
        *("epochs", "time", "energy", "max_power", "cost", "reached", "stop_reason", "metrics", "exit_code"),
        *("ended", "after_time", "after_energy", "power_limit", "cause", "epoch_timing", "after_metrics"),
        "profile_overhead",
    )

    def record_fields(self) -> dict[str, Any]:
        """What a trial's history record takes from its outcome: `RECORDED`, and ``observed`` from the reason.

        Every writer of a finished trial's record (the executors, ``zeus-run tell``) uses it,
        so a new outcome field reaches the history in one place.
        """
        fields = {name: getattr(self, name) for name in self.RECORDED}
        fields["observed"] = self.stop_reason.observed
        return fields

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        out = dataclasses.asdict(self)
        out["metrics"] = list(self.metrics)
        if self.after_metrics is not None:
            out["after_metrics"] = list(self.after_metrics)
        out["stop_reason"] = str(self.stop_reason)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialOutcome:
        """The inverse of `to_json` (unknown keys are ignored, so an older launcher reads a newer agent's outcome).

        Raises:
            ValueError: The stop reason is unknown.
            TypeError: A required field is missing.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in data.items() if k in names}
        d["metrics"] = tuple(d.get("metrics") or ())
        if d.get("after_metrics") is not None:
            d["after_metrics"] = tuple(d["after_metrics"])
        d["stop_reason"] = StopReason.parse(d.get("stop_reason", ""))
        return cls(**d)


# -- the cause of a failure -----------------------------------------------------------------

#: A line that names an error: ``RuntimeError: CUDA out of memory``, ``torch.OutOfMemoryError: ...``,
#: ``ERROR: ...``, ``Killed``, ``Segmentation fault``.
_ERROR_LINE = re.compile(
    r"^\s*(?:[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Fault)\b|(?:ERROR|Error|FATAL|Fatal)\b|"
    r"Killed\b|Segmentation fault|Traceback \(most recent call last\)|CUDA error)"
)
#: The line the launcher itself writes above a crashed script's log tail.
_LAUNCHER_HEADER = re.compile(r"^exit code -?\d+; last output:\s*$")


def crash_cause(stop_reason: StopReason, message: str | None, exit_code: int | None) -> str | None:
    """One line naming why a trial failed, or None when it did not fail.

    For a crash, the last line of the log's tail that names an error (a Python
    exception, ``ERROR ...``, ``Killed``); failing that, its last non-empty
    line; failing that, the exit code or the signal that killed it. For a
    timeout, an infrastructure failure or a script that exited early, the
    first line of the explanation.
    """
    if not stop_reason.failure:
        return None
    lines = [ln.strip() for ln in (message or "").splitlines()]
    lines = [ln for ln in lines if ln and not _LAUNCHER_HEADER.match(ln)]
    if stop_reason is StopReason.CRASHED:
        for line in reversed(lines):
            if _ERROR_LINE.match(line) and not line.startswith("Traceback"):
                return line
        if lines and not lines[-1].startswith("exit code") and lines[-1] != "(no log)":
            return lines[-1]
        return exit_text(exit_code)
    return lines[0] if lines else str(stop_reason)


def exit_text(code: int | None) -> str:
    """``exit code 3``, ``killed by SIGKILL`` or ``no exit code``."""
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
