"""How a told trial's time and energy are counted: one measurement, stated, whatever the door.

The side that runs the training measures it. Under ``zeus-run exec`` the agent
does (``outcome.json``); otherwise the training side's process does, through the
same energy sources as the launcher (`zeus_run.energy`: NVML, RAPL, the CPU-time
estimate): `zeus_run.train.Trial` writes each epoch's time and energy into the
event log with an ``info`` event that says how it measures, the Python `Job`
passes `Measured`, and the server's client sends them with each report and the
tell. ``zeus-run tell --energy`` and ``--time`` are figures told by hand
(``reported``).

A trial whose energy nothing measured (a plain ``tell`` without ``--energy``) is
recorded as ``unmeasured``: never charged ``watts x time`` as if measured. Its
cost must still be comparable with the job's measured trials, so its energy is
imputed (`PowerBasis.impute`): its time x the median power (energy / time) of the job's
measured trials of the same batch size, else of all its measured trials
(``energy_method: imputed``). A job none of whose trials was measured yet has
nothing to impute from: its unmeasured trials are charged the spec's
``energy.watts`` x wall time (``energy_method: watts-x-time``), all on that one
basis.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import statistics
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zeus_run.contract import RunningMarker, StopReason, TrialFiles, TrialOutcome, iso_seconds
from zeus_run.engine.record import UNMEASURED, Measurement
from zeus_run.records import TrialRecord

#: ``energy_source`` of figures told by hand (``zeus-run tell --energy``).
REPORTED = "reported"


@dataclass(frozen=True)
class Measured:
    """Time and energy measured in the trial's own process (the Python `Job`, the server's client).

    Attributes:
        time: Unit: s.
        energy: Unit: J.
        source: The energy source's name (``nvml``, ``rapl``, ``estimate``).
        estimated: Whether the energy is an estimate.
        method: How it was obtained.
        max_power: Max power for the cost (unit: W).
        window: The span measured (`zeus_run.energy.SelfMeter.window`), None if not said.
    """

    time: float
    energy: float
    source: str
    estimated: bool
    method: str | None
    max_power: float
    window: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)

    @classmethod
    def of(cls, time: float, energy: float, info: Mapping[str, Any]) -> Measured:
        """A measurement from its figures and a meter's ``info`` (`zeus_run.energy.SelfMeter.info`)."""
        window = info.get("window")
        return cls(
            time,
            energy,
            str(info["source"]),
            bool(info["estimated"]),
            info.get("method"),
            float(info["max_power"]),
            window if isinstance(window, Mapping) else None,
        )

    @property
    def how(self) -> Measurement:
        return Measurement(self.source, self.estimated, self.method, self.window)


def meter_of(info: Mapping[str, Any] | None, default_power: float) -> tuple[Measurement, float] | None:
    """How the training side says it measured (its ``info`` event), and its max power; None if it did not say."""
    if not info or "source" not in info:
        return None
    how = Measurement(str(info["source"]), bool(info.get("estimated", True)), info.get("method"))
    return how, float(info.get("max_power") or default_power)


@dataclass
class PowerBasis:
    """The measured power (energy / time) and max power of a job's real trials, per batch size: what `PowerBasis.impute`
    charges an unmeasured trial. Built from the records once and extended as they are appended (the ask/tell
    fold keeps one), so a tell does not re-read the history.

    Attributes:
        by_batch: Batch size -> (powers, max powers) of its measured trials, in record order (unit: W; two
            arrays of doubles: 16 bytes a trial).
    """

    by_batch: dict[int, tuple[array[float], array[float]]] = field(default_factory=dict)

    @classmethod
    def of(cls, history: Iterable[TrialRecord]) -> PowerBasis:
        basis = cls()
        basis.extend(history)
        return basis

    def extend(self, records: Iterable[TrialRecord]) -> None:
        for r in records:
            if r.kind != "real" or r.energy_source == UNMEASURED or r.time <= 0 or r.energy <= 0:
                continue
            powers, max_powers = self.by_batch.setdefault(r.batch_size, (array("d"), array("d")))
            powers.append(r.energy / r.time)
            max_powers.append(r.max_power)

    def impute(self, batch_size: int, time: float, watts: float) -> tuple[float, Measurement, float]:
        """Energy of an unmeasured trial of ``batch_size`` that ran ``time`` seconds, how it was obtained, and the
        max power its cost charges time at (the measured trials', so that the costs compare; unit: W).

        Args:
            batch_size: The trial's batch size.
            time: Its time (unit: s).
            watts: The spec's ``energy.watts`` (used only when no trial of the job was measured).
        """
        same = self.by_batch.get(batch_size)
        if same is not None:
            powers, max_powers = same
        else:  # no trial of this batch size measured: the job's measured trials
            powers = array("d", itertools.chain.from_iterable(p for p, _ in self.by_batch.values()))
            max_powers = array("d", itertools.chain.from_iterable(m for _, m in self.by_batch.values()))
        if not powers:
            return watts * time, Measurement(UNMEASURED, True, "watts-x-time"), watts
        return statistics.median(powers) * time, Measurement(UNMEASURED, True, "imputed"), statistics.median(max_powers)


def window_of(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A measurement window as the training side described it (`zeus_run.energy.SelfMeter.window`; untrusted),
    checked: ``by``, ``from``, ``to``, ``extended_at`` and ``start`` short strings; ``extended_s``, ``extended_j``, ``ask_s``,
    ``extended_end_s`` and ``extended_end_j`` finite, non-negative numbers. Anything else is dropped."""
    out: dict[str, Any] = {}
    for key in ("by", "from", "to", "extended_at", "start"):
        v = raw.get(key)
        if isinstance(v, str) and 0 < len(v) <= 40:
            out[key] = v
    for key in ("extended_s", "extended_j", "ask_s", "extended_end_s", "extended_end_j"):
        v = raw.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0:
            out[key] = float(v)
    return out


def unwatched_span(
    marker: RunningMarker, history: Iterable[TrialRecord], watts: float, eta: float
) -> tuple[TrialOutcome, Measurement, str] | None:
    """What a trial a dead launcher left spent while nobody watched it: energy really spent counts.

    Its span runs from its launch (the marker's ``started_at``) to where a later launcher stopped
    what it left running (``killed_at`` in its trial directory), or else to the last write in its
    trial directory (it ended on its own). No meter read it: its energy is imputed as a tell without
    a measurement is (`PowerBasis`). None: the span cannot be told (no start, no trial directory).

    Args:
        marker: The trial's ``running.json`` marker.
        history: The job's records (their measured power).
        watts: The spec's ``energy.watts``.
        eta: The job's ``eta`` (the outcome's cost).
    """
    start = iso_seconds(marker.started_at)
    if start is None or not marker.trial_dir:
        return None
    trial_dir = Path(marker.trial_dir)
    try:
        end = float((trial_dir / TrialFiles.KILLED).read_text().strip())
        how_end = "until a later launcher stopped it"
    except (OSError, ValueError):
        times = []
        for name in (TrialFiles.EVENTS, TrialFiles.OUTPUT):
            with contextlib.suppress(OSError):
                times.append((trial_dir / name).stat().st_mtime)
        if not times:
            return None
        end, how_end = max(times), "until its last write"
    span = end - start
    if not math.isfinite(span) or span <= 0:
        return None
    energy, how, max_power = PowerBasis.of(history).impute(marker.batch_size, span, watts)
    outcome = TrialOutcome.of(
        StopReason.INTERRUPTED, max_power=max_power, time=span, energy=energy, eta=eta, cause=None
    )
    note = f"; its {span:.1f} s from its launch {how_end} are charged, energy not measured ({how.method})"
    return outcome, how, note


def lease_span(
    marker: RunningMarker, power: PowerBasis, watts: float, eta: float, end: float
) -> tuple[TrialOutcome, Measurement, str] | None:
    """What an ask whose lease ran out spent (an evicted pod, a lost client, a tell a full disk lost): its span,
    from the ask to its trial's last sign of life (``end``), charged as a dead launcher's trial is: no meter's
    figure reached zeus-run, so its energy is imputed from the job's measured trials (`PowerBasis`), labelled
    ``unmeasured``. None: the span cannot be told.

    Args:
        marker: The ask's ``running.json`` marker.
        power: The job's measured trials' power.
        watts: The spec's ``energy.watts``.
        eta: The job's ``eta`` (the outcome's cost).
        end: Its last sign of life (Unix time, unit: s).
    """
    start = marker.asked_at if marker.asked_at is not None else iso_seconds(marker.started_at)
    if start is None:
        return None
    span = end - start
    if not math.isfinite(span) or span <= 0:
        return None
    energy, how, max_power = power.impute(marker.batch_size, span, watts)
    outcome = TrialOutcome.of(
        StopReason.INFRASTRUCTURE, max_power=max_power, time=span, energy=energy, eta=eta, cause=None
    )
    note = f"; its {span:.1f} s from the ask to its last sign of life are charged, energy not measured ({how.method})"
    return outcome, how, note
