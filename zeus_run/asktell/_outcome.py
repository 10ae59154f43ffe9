"""A told trial's outcome: from the agent's (``zeus-run exec``), or read back from the events its training side
wrote (`zeus_run.train.Trial`, a callback, `report_epoch`) through the launcher's stop rule, with its time and
energy as that side measured them to its close or exit (`zeus_run.engine.measure`). A script that died before
it began (no ``start`` event) is an environment error, as ``zeus-run run`` records one.
"""

from __future__ import annotations

import dataclasses
import os
import time as _time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from zeus_run.contract import RunningMarker, StopReason, TrialFiles, TrialOutcome, crash_cause, exit_text
from zeus_run.cost import zeus_cost
from zeus_run.door.lease import ask_provenance
from zeus_run.engine.measure import REPORTED, Measured, PowerBasis, meter_of, window_of
from zeus_run.engine.record import UNMEASURED, Measurement, marker_fields, trial_record
from zeus_run.engine.request import request_of
from zeus_run.executors import measured_by, now
from zeus_run.records import TrialRecord
from zeus_run.spec import JobSpec
from zeus_run.trial.agent import read_agent_info, read_outcome
from zeus_run.trial.events import EpochEvent, EventLogTail
from zeus_run.trial.stop import StopRule, judge


@dataclass(frozen=True)
class Told:
    """What a tell says of its trial (see `tell`'s arguments)."""

    exit_code: int | None
    energy: float | None
    time: float | None
    message: str | None
    measured: Measured | None


def build_record(spec: JobSpec, marker: RunningMarker, told: Told, power: Callable[[], PowerBasis]) -> TrialRecord:
    """The record of an ask's trial, from the agent's outcome or from its events (`power`: the job's measured
    power, for an unmeasured trial's imputed energy)."""
    tdir = Path(marker.trial_dir or "")
    outcome = read_outcome(tdir)
    reported: list[str] = []
    if outcome is not None:  # the agent ran it (zeus-run exec): measured where it ran
        how = measured_by(read_agent_info(tdir) or {}, Measurement("estimate", True))
    else:
        outcome, how, reported = _from_events(spec, marker, told, power)
    notes = [n for n in (told.message, outcome.message) if n]
    return trial_record(
        spec.name,
        request_of(marker, spec),
        outcome,
        how,
        **marker_fields(marker),
        exit_code=told.exit_code if outcome.exit_code is None else outcome.exit_code,
        message="; ".join(dict.fromkeys(notes)) or None,
        ended_at=now(),
        triggered_at=marker.started_at,  # an ask is its trial's trigger
        provenance={**ask_provenance(marker), **_where(tdir)},
        reported=" ".join(reported) or None,
    )


def _from_events(
    spec: JobSpec, marker: RunningMarker, told: Told, power: Callable[[], PowerBasis]
) -> tuple[TrialOutcome, Measurement, list[str]]:
    """The outcome of a trial no agent watched: its epochs read back through the stop rule, and its time and
    energy as the training side measured them (`zeus_run.engine.measure`)."""
    tdir = Path(marker.trial_dir or "")
    tail = EventLogTail(str(tdir / TrialFiles.EVENTS))
    events = tail.finish()
    start = trial_start(tail, marker)
    meter = meter_of(tail.measured, spec.energy.watts)
    max_power = max_power_of(spec, told.measured, meter)
    code = told.exit_code if told.exit_code is not None else tail.end.exit_code  # else the script's own, at its exit
    if _never_began(tdir, tail, events, told, code):
        return _could_not_start(spec, marker, told, code, power, start)
    judged_points = points(spec, events, start, max_power)
    judged = judge(stop_rule(spec, marker), [(m, c) for m, _, _, c in judged_points])
    reason, counted = judged.reason, judged.epochs
    # The point it was judged at: (time, energy) since it began, None where unknown.
    at: tuple[float | None, float | None] | None = None
    if reason is not None and counted > 0:
        at = judged_points[counted - 1][1:3]
    if tail.stop is not None and tail.stop_after is not None and (reason is None or tail.stop_after < counted):
        # Stopped live between epochs (the hard cut, the timeout), before the rule would have at an epoch.
        reason, counted = StopReason.parse(tail.stop), tail.stop_after
        at = tail.stop_point
    if reason is None:
        reason = StopReason.CRASHED if code not in (None, 0) else StopReason.EXITED
    # The whole trial, as told, or measured (in the process that tells, or to the script's exit: its last
    # `end` event), else up to now.
    end = tail.end.reading
    total_t = told.time if told.time is not None else told.measured.time if told.measured is not None else None
    if total_t is None:
        total_t = end[0] if end is not None else max(_time.time() - start, 0.0)
    total_e = told.energy if told.energy is not None else told.measured.energy if told.measured else None
    if total_e is None and end is not None and told.time is None:
        total_e = end[1]
    t = at[0] if at is not None and at[0] is not None else total_t
    e = at[1] if at is not None else None
    if e is None and total_e is not None:
        e = total_e * (t / total_t) if total_t > 0 and t < total_t else total_e
    reported = [*(["time"] if told.time is not None else []), *(["energy"] if told.energy is not None else [])]
    if at is not None and at[1] is not None:
        how = meter[0] if meter is not None else Measurement(REPORTED)
        if meter is None:
            reported = reported if "energy" in reported else [*reported, "energy"]  # in the order stated: time, energy
    elif told.energy is not None:
        how = Measurement(REPORTED)
    elif told.measured is not None:
        how = told.measured.how
    elif end is not None and end[1] is not None and total_e is not None:  # its own reading at its close or exit
        how = meter[0] if meter is not None else Measurement(REPORTED)
    elif events and events[-1].energy is not None:
        e = events[-1].energy
        how = meter[0] if meter is not None else Measurement(REPORTED)
        if meter is None:  # a client's figures at its last epoch (Zeus's client): time and energy at one point
            if told.time is None and events[-1].elapsed is not None:
                t = events[-1].elapsed
                reported = ["time"]
            reported = [*reported, "energy"]
    else:
        how = Measurement(UNMEASURED)
    if e is None or not how.measured:
        e, how, max_power = power().impute(marker.batch_size, t, spec.energy.watts)
    elif how.source != REPORTED:
        how = dataclasses.replace(how, window=_window(tail, told, end))
    decided = at is not None
    message = None if told.message else _last_words(tail, code)
    outcome = TrialOutcome.of(
        reason,
        epochs=counted,
        time=t,
        energy=e,
        max_power=max_power,
        eta=spec.eta,
        exit_code=code,
        after_time=max(total_t - t, 0.0) if decided else None,
        after_energy=max(total_e - e, 0.0) if decided and total_e is not None else None,
        metrics=tuple(ev.metric for ev in events[:counted]),
        malformed=tail.malformed,
        message=message,
        cause=crash_cause(reason, told.message or message, code),
    )
    return outcome, how, reported


def _last_words(tail: EventLogTail, code: int | None) -> str | None:
    """What a failed script said last, from its own events: the output it printed before it exited (as the
    launcher keeps its log's tail), else the exception that ended it."""
    if code not in (None, 0) and tail.end.output:
        return f"{exit_text(code)}; last output:\n{tail.end.output}"
    return tail.error


def _window(tail: EventLogTail, told: Told, end: tuple[float, float | None] | None) -> dict[str, object] | None:
    """The span the training side measured (its meter's ``window``) and where it ended: ``exit`` or ``close``
    (its last reading), or ``tell`` (no reading after its last epoch)."""
    raw = told.measured.window if told.measured is not None else (tail.measured or {}).get("window")
    window: dict[str, object] = window_of(dict(raw)) if isinstance(raw, Mapping) else {}
    if not window:
        return None
    if told.measured is not None:
        window.setdefault("to", "close")
    else:
        window["to"] = tail.end.at if end is not None and tail.end.at else "tell"
        if tail.end.carried is not None:  # the interpreter's teardown after its exit reading, to the exit
            window["extended_end_s"], window["extended_end_j"] = tail.end.carried
    return window


def _never_began(tdir: Path, tail: EventLogTail, events: Sequence[EpochEvent], told: Told, code: int | None) -> bool:
    """Whether a failed script died before it could start: the ask gave it a command (a plan), it exited non-zero,
    and nothing shows it ever ran: no ``start`` event (`zeus_run.train.Trial` writes one first thing), no epoch,
    no figures (told by hand, ``--time`` or ``--energy``: a run that took that long), and no output for the
    classifier to read (``--log``)."""
    if code in (None, 0) or told.message or told.measured is not None:
        return False
    if told.energy is not None or told.time is not None:
        return False
    if tail.started is not None or events or tail.end.reading is not None or tail.error or tail.end.output:
        return False
    return os.path.lexists(tdir / TrialFiles.PLAN)


def _could_not_start(
    spec: JobSpec,
    marker: RunningMarker,
    told: Told,
    code: int | None,
    power: Callable[[], PowerBasis],
    start: float,
) -> tuple[TrialOutcome, Measurement, list[str]]:
    """The outcome of a script that died before `zeus_run.train.Trial` began (`_never_began`): an environment
    error, as ``zeus-run run`` records an import error, never a crash of the batch size; nothing measured it."""
    t = told.time if told.time is not None else max(_time.time() - start, 0.0)
    e, how, max_power = power().impute(marker.batch_size, t, spec.energy.watts)
    cause = (
        f"the script ended ({exit_text(code)}) before it started training: no start event in its trial directory "
        "(zeus_run.train.Trial writes one first thing), so it died on an import, a missing file or its interpreter"
    )
    fix = (
        "Run it by hand to see why, or tell with its output (`--log FILE`) so that zeus-run reads the error; "
        "fix the environment, then ask again (recorded as environment_error, not observed)"
    )
    outcome = TrialOutcome.of(
        StopReason.ENVIRONMENT_ERROR,
        time=t,
        energy=e,
        max_power=max_power,
        eta=spec.eta,
        exit_code=code,
        message=f"{cause}. {fix}",
        cause=cause,
    )
    return outcome, how, []


def stop_rule(spec: JobSpec, marker: RunningMarker) -> StopRule:
    """The stop rule an ask's trial is held to (the launcher's: `zeus_run.trial.stop`)."""
    return StopRule(
        spec.max_epochs, spec.target_metric, spec.higher_is_better, marker.threshold, spec.timeout, marker.curve_stop
    )


def trial_start(tail: EventLogTail, marker: RunningMarker) -> float:
    """When the trial began (Unix time): its script's start, else the ask."""
    if tail.started is not None:
        return tail.started
    return marker.asked_at if marker.asked_at is not None else _time.time()


def max_power_of(spec: JobSpec, measured: Measured | None, meter: tuple[Measurement, float] | None) -> float:
    if measured is not None:
        return measured.max_power
    return meter[1] if meter is not None else spec.energy.watts


def points(
    spec: JobSpec, events: Sequence[EpochEvent], start: float, max_power: float
) -> list[tuple[float, float | None, float | None, float | None]]:
    """Per epoch: its metric, time and energy since the trial began (None: unknown), and the cost the stop rule
    judges (energy unknown: the spec's ``energy.watts`` x time, as the rule had it live)."""
    out: list[tuple[float, float | None, float | None, float | None]] = []
    for ev in events:
        elapsed = ev.elapsed if ev.elapsed is not None else None if ev.time is None else max(ev.time - start, 0.0)
        cost = None
        if elapsed is not None:
            used = ev.energy if ev.energy is not None else spec.energy.watts * elapsed
            cost = zeus_cost(used, elapsed, spec.eta, max_power)
        out.append((ev.metric, elapsed, ev.energy, cost))
    return out


def _where(tdir: Path) -> dict[str, object]:
    """Where the trial ran, from ``agent.json`` when an agent ran it."""
    agent = read_agent_info(tdir) or {}
    out: dict[str, object] = {}
    if agent.get("host"):
        out["trial_host"] = agent["host"]
    devices = (agent.get("energy") or {}).get("devices")
    if devices:
        out["gpus"] = devices
    return out
