"""The one record builder: a trial's history record from the engine's decision and the trial's outcome.

Every writer of a record builds it here: the executors (local and Slurm), ``tell``
(ask/tell, the Python `Job`, the server), the records of trials whose launcher died
or whose lease expired, the simulator and replay. The decision gives the trial's
place and choice (`zeus_run.engine.request.TrialRequest`), the outcome what happened
(`zeus_run.contract.TrialOutcome.record_fields`), the `Measurement` how its energy
was obtained; anything else a door knows (seed, provenance, times, log) is passed as
a field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zeus_run.contract import RunningMarker, StopReason, TrialFiles, TrialOutcome
from zeus_run.engine.request import TrialRequest
from zeus_run.optimizer import Decision
from zeus_run.records import TrialRecord

if TYPE_CHECKING:
    from zeus_run.energy import EnergySource
    from zeus_run.spec import JobSpec

#: ``energy_source`` of a trial whose energy nothing measured (a plain ``tell`` without ``--energy``).
UNMEASURED = "unmeasured"


@dataclass(frozen=True)
class Measurement:
    """How a trial's energy was obtained (stored in its record).

    Attributes:
        source: ``nvml``, ``rapl``, ``estimate``, ``reported`` (told with ``--energy``),
            ``unmeasured``, ``trace`` (simulated) or ``replay``.
        estimated: Whether the energy is an estimate rather than a measurement.
        method: How (``counter``, ``watts-x-cpu-time``, ``watts-x-time``, ``imputed``...), if known.
        window: The span measured and by whom (the record's ``window``): ``by`` (``launcher``, ``agent``,
            ``script``), ``from`` (``launch``, ``process-start``, ``previous-trial``, ``trial``), ``to`` (``exit``,
            ``close``, ``tell``), and for a script that measured itself, the start-up it charged without a
            reading (``extended_s``, ``extended_j``, ``extended_at``: `zeus_run.energy.SelfMeter`). None: not said.
    """

    source: str
    estimated: bool = False
    method: str | None = None
    window: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)

    @classmethod
    def of(cls, energy: EnergySource, by: str = "launcher") -> Measurement:
        """How ``energy`` measures a script's processes from launch to exit, watched by ``by`` (the launcher or
        the agent)."""
        return cls(energy.name, energy.estimated, energy.method, launched(by))

    @property
    def measured(self) -> bool:
        """Whether something measured (or was told) the energy."""
        return self.source != UNMEASURED


def launched(by: str) -> dict[str, str]:
    """The window of a script measured by a process that launched it (``launcher``, ``agent``): launch to exit."""
    return {"by": by, "from": "launch", "to": "exit"}


def trial_record(
    job: str,
    req: TrialRequest,
    outcome: TrialOutcome,
    how: Measurement,
    *,
    kind: str = "real",
    **fields: Any,
) -> TrialRecord:
    """The history record of one trial.

    Args:
        job: The job's name.
        req: The engine's decision (place, batch size, stage, threshold).
        outcome: What happened (its `TrialOutcome.record_fields`; ``observed`` from its reason).
        how: How its energy was obtained.
        kind: ``real``, ``simulated`` or ``replayed``.
        fields: Any other record field the door knows; these win over the defaults above.
    """
    base: dict[str, Any] = {
        "job": job,
        "recurrence": req.recurrence,
        "attempt": req.attempt,
        "trial": req.trial,
        "batch_size": req.decision.batch_size,
        "stage": req.decision.stage,
        "detail": req.decision.detail,
        "cost_threshold": None if math.isinf(req.cost_threshold) else req.cost_threshold,
        **outcome.record_fields(),
        "energy_source": how.source,
        "estimated": how.estimated,
        "energy_method": how.method,
        "window": None if how.window is None else dict(how.window),
        "kind": kind,
    }
    base.update(fields)
    base.update(estimated_part(how, base))
    return TrialRecord(**base)


def estimated_part(how: Measurement, fields: Mapping[str, Any]) -> dict[str, Any]:
    """Where a measured trial's start-up was estimated (a script that measured itself charged the time before its
    meter could read the counter from a model: the window's ``extended_j``), the record says so: ``estimated``
    true, ``estimated_energy`` and ``estimated_share`` of its whole energy (``energy`` + ``after_energy``). A
    trial whose energy is an estimate whole (``estimated`` already) gets nothing more."""
    window = how.window or {}
    part = window.get("extended_j")
    if how.estimated or not isinstance(part, (int, float)) or isinstance(part, bool) or part <= 0:
        return {}
    whole = float(fields.get("energy") or 0.0) + float(fields.get("after_energy") or 0.0)
    share = min(part / whole, 1.0) if whole > 0 and math.isfinite(whole) else None
    return {"estimated": True, "estimated_energy": float(part), "estimated_share": share}


def interrupted_record(
    spec: JobSpec, marker: RunningMarker, spent: tuple[TrialOutcome, Measurement, str] | None = None
) -> TrialRecord:
    """The record of a trial whose launcher died, from its marker: the engine's decision, interrupted, with what it
    spent while nobody watched it where that can be told (`zeus_run.engine.measure.unwatched_span`)."""
    return marker_record(spec.name, marker, spent)


def marker_record(
    job: str,
    marker: RunningMarker,
    spent: tuple[TrialOutcome, Measurement, str] | None = None,
) -> TrialRecord:
    """A trial's record from its ``running.json`` marker alone: its decision, interrupted, not observed.

    Args:
        job: The job's name.
        marker: Its marker.
        spent: What it spent while nobody watched it, how that was obtained, and a note for its message
            (`zeus_run.engine.measure.unwatched_span`); None: nothing known (0 s, 0 J).
    """
    decision = TrialRequest(
        recurrence=marker.recurrence,
        attempt=marker.attempt,
        trial=marker.trial,
        observed=0,  # not recorded
        decision=Decision(marker.batch_size, marker.stage, marker.detail),
        cost_threshold=marker.threshold,
    )
    outcome = TrialOutcome.of(StopReason.INTERRUPTED, max_power=marker.max_power, cause=None)
    how, note = Measurement(marker.energy_source, marker.estimated), ""
    if spent is not None:
        outcome, how, note = spent
    return trial_record(
        job,
        decision,
        outcome,
        how,
        **marker_fields(marker),
        message=f"the launcher (pid {marker.pid}) died during this trial; it was not fed to the optimizer{note}",
        provenance={"slurm_job_id": marker.slurm_job_id} if marker.slurm_job_id else None,
    )


def marker_fields(marker: RunningMarker) -> dict[str, Any]:
    """What a trial's record takes from its ``running.json`` marker beyond the decision (`trial_record`'s fields)."""
    return {
        "learning_rate": marker.learning_rate,
        "seed": marker.seed,
        "cost_threshold": marker.cost_threshold,
        "started_at": marker.started_at,
        "log": f"trials/{TrialFiles.dir_name(marker.recurrence, marker.attempt)}/{TrialFiles.OUTPUT}",
        "horizon": marker.horizon,
        "lifetime": marker.lifetime,
        **marker.stamp(),
    }
