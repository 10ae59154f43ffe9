"""This process's own time and energy: what the training side measures when no launcher watches it.

Under ``zeus-run run`` and ``exec`` the launcher (or the agent) measures the
script's processes from launch to exit. A script told back through ask/tell, driven by the server,
or run through the Python `Job` measures itself with `SelfMeter`, through the
same sources (`open_energy_source`: NVML, RAPL, the estimate on the spec's
``energy.basis``), over the same span, so that every trial of a job is measured alike:

* **The window opens** when the process started (``/proc/self/stat``), or, in a process that runs
  trial after trial (the server's client, the `Job` API), at its ask (the previous trial's part ends
  there: `zeus_run._process_trials`). The meter can read its source only once the script reaches
  `zeus_run.train.Trial` (after ``import torch``, the data, CUDA's start); the time before is charged
  - from the previous trial's last reading of the same source, where there is one (`Carry`: measured,
    the counter's difference);
  - from the reading ``zeus-run ask`` took of the same counter on the same host before the process
    started (``ZEUS_ASK_ENERGY``, a shell ask/tell: measured, ``start: ask-counter``), the counter's
    difference in the share of the span since the ask that the process lived;
  - else it is **estimated** (the record says so: ``estimated``, ``estimated_energy``,
    ``estimated_share``): at the power the source reads when the meter opens, before the trial's work
    starts (NVML's power draw; the estimate's ``watts``, or this process's CPU time on the ``cpu-time``
    basis; a source without a power reading, RAPL, is sampled for `POWER_SAMPLE_S`).
* **The window closes** at the process's exit (`zeus_run.train` writes a last reading there), or, in a process
  that tells its trial itself (the end of the `Job` block, the server's client's finish), at the tell, and
  what the process spends after it (saving, evaluating, tearing down) is appended to the trial's record
  when the process asks for its next trial or exits (`zeus_run.rundir.tails`).

* **zeus-run's own work is not the trial's**: where the process asks for its trial itself (the `Job` API,
  the server's client), the time of that ask is left out of the window (``ask_s``), as a launcher's ask,
  made before it launches the script, is.

`SelfMeter.window` says which, and how much was charged without a reading (``extended_s``,
``extended_j``, ``extended_at``); the tell keeps it in the record's ``window``.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from zeus_run.energy._base import EnergySource
from zeus_run.energy._estimate import EstimatedEnergy

if TYPE_CHECKING:
    from zeus_run.spec import EnergySettings

#: How long a source that cannot read its power draw is sampled for the start-up's power (unit: s).
POWER_SAMPLE_S = 0.2
#: The spec's ``energy`` keys a meter takes.
_KNOWN = ("source", "watts", "basis", "gpus", "include")


def own_cpu_seconds() -> float:
    """CPU time of this process and its reaped children (unit: s)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def meter_settings(settings: Mapping[str, Any]) -> EnergySettings:
    """The energy settings a training process's meter opens its source with, from the ``energy`` section as
    zeus-run handed it over (``ZEUS_ENERGY``, or a tail watcher's orders)."""
    return _settings(_fields(settings))


def _fields(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The ``energy`` settings a meter is opened with (unknown keys dropped, lists as tuples)."""
    fields = {k: v for k, v in settings.items() if k in _KNOWN}
    for key in ("gpus", "include"):
        if fields.get(key) is not None:
            fields[key] = tuple(str(v) for v in fields[key])
    if fields.get("watts") is not None:
        fields["watts"] = float(fields["watts"])
    return fields


def _settings(fields: Mapping[str, Any]) -> EnergySettings:
    """The settings as the energy sources read them. ``ZEUS_ENERGY`` carries every key: then the spec's schema
    (slow to import, for a process measuring itself) is not needed for its defaults."""
    if all(k in fields for k in _KNOWN) and all(fields[k] is not None for k in _KNOWN if k != "gpus"):
        return cast("EnergySettings", SimpleNamespace(**fields))
    from zeus_run.spec import EnergySettings

    return EnergySettings(**{k: v for k, v in fields.items() if v is not None})


@dataclass
class Carry:
    """A meter handed from one trial of a process to the next: its open source and its last reading.

    Attributes:
        fields: The settings the source was opened with (a trial with other settings opens its own).
        source: The open source.
        at: When it was last read (Unix time, unit: s).
        energy: What it read then (its cumulative energy, unit: J).
        at_ask: Whether it was last read at this process's next ask (the previous trial's tail ended there).
        counter: The device's own counter then (`EnergySource.counter`; None: the source has none), where a
            watcher outside the process goes on from (`zeus_run._tail_watch`).
        mono: ``CLOCK_MONOTONIC`` at ``at`` (the same in every process, unmoved by a wall-clock step): a tail's
            time is counted on it.
    """

    fields: dict[str, Any]
    source: EnergySource
    at: float
    energy: float
    at_ask: bool = False
    counter: float | None = None
    mono: float = field(default_factory=time.monotonic)

    def close(self) -> None:
        self.source.track(None)
        self.source.close()


class SelfMeter:
    """Time and energy of this process's trial, from the window's start (see the module docstring).

    Args:
        settings: The spec's ``energy`` section as a mapping (``source``, ``watts``, ``basis``,
            ``gpus``, ``include``; unknown keys are ignored), as ``ZEUS_ENERGY`` carries it.
        since: The window opens at this Unix time (the process's start, or its previous trial's end);
            None: now.
        carry: The previous trial's meter in this process (`handover`): with the same settings its
            source goes on, and the time since its last reading is measured, not extended.
        ask_s: Seconds of the window this process spent asking zeus-run for the trial: not charged.
        ask_cpu_s: The CPU time of that ask (unit: s), left out of a start-up charged by CPU time.
        at_ask: The counter as ``zeus-run ask`` read it (`ask_reading`; ``ZEUS_ASK_ENERGY``): with the same
            source on this host, taken before ``since``, the start-up is measured from it.
    """

    def __init__(
        self,
        settings: Mapping[str, Any],
        since: float | None = None,
        carry: Carry | None = None,
        ask_s: float = 0.0,
        ask_cpu_s: float = 0.0,
        at_ask: Mapping[str, Any] | None = None,
    ) -> None:
        from zeus_run.energy import open_energy_source

        self._fields = _fields(settings)
        if carry is not None and carry.fields != self._fields:
            carry.close()
            carry = None
        self.source: EnergySource = carry.source if carry is not None else open_energy_source(_settings(self._fields))
        self.source.track(own_cpu_seconds)
        self._t0 = time.monotonic()
        opened = time.time()
        self._e0 = self.source.read()
        self._pre_t = 0.0
        self._pre_e = 0.0
        #: The span and how it is measured (the record's ``window``).
        self.window: dict[str, Any] = {"by": "script", "from": "trial"}
        if carry is not None:
            span = max(opened - carry.at, 0.0)
            self._pre_t = max(span - ask_s, 0.0)
            share = self._pre_t / span if span > 0 else 1.0  # the ask's share of the counter's difference left out
            self._pre_e = max(self._e0 - carry.energy, 0.0) * share
            self.window["from"] = "ask" if carry.at_ask else "previous-trial"
        elif since is not None:
            self._pre_t = max(opened - since - ask_s, 0.0)
            asked = _same_counter(at_ask, self.source, self._fields, since)
            if asked is not None:  # the counter read at the ask, on this host, before this process started
                span = max(opened - asked[0], 0.0)
                share = min(self._pre_t / span, 1.0) if span > 0 else 1.0  # the process's part of the span
                self._pre_e = max(asked[2] - asked[1], 0.0) * share
                self.window.update({"from": "process-start", "start": "ask-counter"})
                if since - asked[0] > ASK_GAP_S:  # the shell did other work between: its share is a time share
                    self.window.update(
                        {"extended_s": self._pre_t, "extended_j": self._pre_e, "extended_at": "ask-counter-share"}
                    )
            else:
                self._pre_e, how = self._start_up(self._pre_t, ask_cpu_s)
                self.window.update(
                    {"from": "process-start", "extended_s": self._pre_t, "extended_j": self._pre_e, "extended_at": how}
                )
        if ask_s > 0 and self.window["from"] != "trial":
            self.window["ask_s"] = ask_s

    def _start_up(self, seconds: float, ask_cpu_s: float = 0.0) -> tuple[float, str]:
        """The energy of the ``seconds`` before the meter could read its source, and how it was charged."""
        src = self.source
        if isinstance(src, EstimatedEnergy) and src.basis == "cpu-time":  # the start-up's CPU time, as the launcher
            return src.watts * min(max(own_cpu_seconds() - ask_cpu_s, 0.0), seconds), "cpu-time"
        watts = src.power()
        if watts is not None:
            return watts * seconds, "power-at-start"
        t, e = time.monotonic(), src.read()
        time.sleep(POWER_SAMPLE_S)
        dt = time.monotonic() - t
        return max(src.read() - e, 0.0) / dt * seconds if dt > 0 else 0.0, "power-sampled-at-start"

    def now(self) -> tuple[float, float]:
        """Time (unit: s) and energy (unit: J) since the window opened."""
        return self._pre_t + time.monotonic() - self._t0, self._pre_e + max(self.source.read() - self._e0, 0.0)

    def info(self) -> dict[str, Any]:
        """How it measures: ``source``, ``method``, ``estimated``, ``max_power`` and ``window`` (what the tell
        records)."""
        s = self.source
        return {
            "source": s.name,
            "method": s.method,
            "estimated": s.estimated,
            "max_power": s.max_power,
            "window": dict(self.window),
        }

    def handover(self) -> Carry:
        """End this trial's window and hand the open source to the process's next trial (`Carry`)."""
        at, energy = time.time(), self.source.read()
        return Carry(self._fields, self.source, at, energy, counter=self.source.counter())

    def close(self) -> None:
        self.source.track(None)
        self.source.close()


def ask_reading(settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """The energy counter now, as ``zeus-run ask`` hands it to a script on the same host (``ZEUS_ASK_ENERGY``):
    ``at`` (Unix time), ``energy`` (J), ``source``, ``host`` and ``gpus``. None where the source is an estimate
    (no counter) or cannot be opened here."""
    from zeus_run.energy import open_energy_source

    fields = _fields(settings)
    try:
        source = open_energy_source(_settings(fields))
    except Exception:  # no GPU, no driver here: the script estimates its start-up (and says so)
        return None
    try:
        if source.estimated:
            return None
        energy, at = source.counter(), time.time()
        if energy is None:
            return None
        return {"at": at, "energy": energy, "source": source.name, "host": socket.gethostname(), "gpus": _gpus(fields)}
    except Exception:
        return None
    finally:
        source.close()


def parse_ask_reading(text: str | None) -> dict[str, Any] | None:
    """``ZEUS_ASK_ENERGY``'s reading (`ask_reading`), None where absent or malformed."""
    if not text:
        return None
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    return raw if isinstance(raw, dict) else None


def _gpus(fields: Mapping[str, Any]) -> list[str] | None:
    gpus = fields.get("gpus")
    return None if gpus is None else [str(g) for g in gpus]


def _same_counter(
    at_ask: Mapping[str, Any] | None, source: EnergySource, fields: Mapping[str, Any], since: float
) -> tuple[float, float, float] | None:
    """The ask's reading (time, counter) where it is of ``source``'s counter (`EnergySource.counter`): the same
    source and GPUs, on this host, read before this process started (``since``), with the counter now; else
    None."""
    if not at_ask or source.estimated:
        return None
    at, energy = at_ask.get("at"), at_ask.get("energy")
    if not isinstance(at, (int, float)) or not isinstance(energy, (int, float)) or isinstance(energy, bool):
        return None
    same = (
        at_ask.get("source") == source.name
        and at_ask.get("host") == socket.gethostname()
        and at_ask.get("gpus") == _gpus(fields)
    )
    if not same or at > since + _CLOCK_SLACK_S:
        return None
    now = source.counter()
    if now is None or not 0 <= energy <= now:  # another counter (a driver reloaded since the ask)
        return None
    return float(at), float(energy), now


#: Longest from the ask's reading to the process's start (unit: s) for its start-up to count as measured: a shell
#: that started the script right after its ask (the ask's own exit, seconds on a loaded machine, included). Later, the counter's difference since the ask also holds what the
#: shell did in between, and the process's time share of it is an estimate (labelled so: ``extended_at``
#: ``ask-counter-share``).
ASK_GAP_S = 2.0
#: How much later than the process's start (read from ``/proc`` to a clock tick) the ask's reading may be dated.
_CLOCK_SLACK_S = 0.02
