"""What a job optimises: the ``objective`` spec section and the ``--objective`` option.

Four kinds, one value object used by the power-limit choice and the batch-size cost alike:

- ``cost`` (default): Zeus's energy-time cost ``eta * energy + (1 - eta) * max_power * time``.
- ``energy``: energy only (the cost with ``eta = 1``).
- ``time``: time only (the cost with ``eta = 0``, in joules at max power).
- ``max-slowdown``: least energy with time at most ``factor`` x the time at the maximum limit
  (Zeus's ``MaxSlowdownConstraint``).

The ``max-slowdown`` bound, precisely:

- *Power limit* (per batch size, hard): of a batch size's profile, the limits whose
  throughput is at least ``1 / factor`` of the throughput at the profile's highest limit are
  eligible; among them the one with the least energy per unit of work is chosen (ties: the
  higher limit). So each epoch takes at most ``factor`` x its time at the maximum limit.
- *Batch size* (across batch sizes, soft): a trial's cost is its energy plus a penalty
  ``PENALTY_WEIGHT x max_power x (time - factor x reference_time)`` for the time it spends
  beyond the bound, where ``reference_time`` is the time the default batch size takes to reach
  the target at the maximum limit. It is a pure function of the history (`history_reference_time`):
  the mean time of the default batch size's converged trials so far, each scaled to the
  maximum limit through that batch size's power profile. Real, simulated and replayed runs
  charge it the same way (`SlowdownCharge`, applied by the engine to each record as it ends);
  until the default has converged (it runs first) trials are charged energy alone. The bandit
  therefore minimises energy among batch sizes that stay within the bound.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from zeus_run.cost import zeus_cost

if TYPE_CHECKING:
    from zeus_run.records import PowerLimitMeasurement, TrialRecord

#: Objective kinds.
KINDS = ("cost", "max-slowdown", "energy", "time")

#: Joules charged per joule a trial would draw at max power in the time it runs beyond the
#: ``max-slowdown`` bound (unitless). Large enough that a batch size over the bound never looks
#: cheaper than one within it whose energy is up to 10x higher.
PENALTY_WEIGHT = 10.0


class ObjectiveError(ValueError):
    """An objective that cannot be used (message names the value and the fix)."""


@dataclass(frozen=True)
class Objective:
    """What the optimizers minimise.

    Attributes:
        kind: One of `KINDS`.
        eta: Weight of energy in the ``cost`` kind, in [0, 1].
        factor: The ``max-slowdown`` bound (> 1: 1.1 allows 10% more time than at the max limit).
    """

    kind: str = "cost"
    eta: float = 0.5
    factor: float = 1.1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ObjectiveError(f"objective kind {self.kind!r} is unknown; use one of {', '.join(KINDS)}")
        if not 0.0 <= self.eta <= 1.0:
            raise ObjectiveError(f"objective eta {self.eta!r} is not in [0, 1]; pick e.g. 0.5")
        if not (math.isfinite(self.factor) and self.factor >= 1.0):
            raise ObjectiveError(f"objective factor {self.factor!r} must be >= 1; pick e.g. 1.1 (10% slower at most)")

    @property
    def cost_eta(self) -> float:
        """The eta of the energy-time cost this objective charges (1 for energy and max-slowdown)."""
        return {"cost": self.eta, "energy": 1.0, "time": 0.0, "max-slowdown": 1.0}[self.kind]

    @property
    def label(self) -> str:
        """The ``--objective`` text for this objective (``cost=0.5``, ``max-slowdown=1.1``, ``energy``)."""
        if self.kind == "cost":
            return f"cost={self.eta:g}"
        if self.kind == "max-slowdown":
            return f"max-slowdown={self.factor:g}"
        return self.kind

    def to_json(self) -> dict[str, object]:
        """The spec section's form."""
        if self.kind == "cost":
            return {"kind": "cost", "eta": self.eta}
        if self.kind == "max-slowdown":
            return {"kind": "max-slowdown", "factor": self.factor}
        return {"kind": self.kind}

    def trial_cost(self, energy: float, time: float, max_power: float, reference_time: float | None = None) -> float:
        """Cost of a trial that took ``time`` and ``energy`` (unit: J).

        Args:
            energy: Unit: J.
            time: Unit: s.
            max_power: Max power of the job's devices (unit: W).
            reference_time: ``max-slowdown`` only: the default batch size's time to the target
                at the max limit (unit: s); None charges energy alone (no bound known yet).
        """
        cost = zeus_cost(energy, time, self.cost_eta, max_power)
        if self.kind == "max-slowdown" and reference_time is not None and math.isfinite(reference_time):
            over = time - self.factor * reference_time
            if over > 0:
                cost += PENALTY_WEIGHT * max_power * over
        return cost


def history_reference_time(
    records: Sequence[TrialRecord],
    default_batch_size: int,
    profile: Sequence[PowerLimitMeasurement] = (),
) -> float | None:
    """The ``max-slowdown`` reference from a history (unit: s; None until the default converged).

    The mean time of ``default_batch_size``'s trials that reached the target, each scaled to
    the maximum limit: ``time x throughput(its limit) / throughput(max limit)``, the
    throughputs from ``profile`` (the default batch size's power profile on this GPU model).
    A trial without a recorded limit, or at a limit the profile lacks, counts as run at the
    maximum limit.
    """
    by_limit = {m.power_limit: m.throughput for m in profile if m.throughput > 0}
    top = by_limit[max(by_limit)] if by_limit else None
    times = []
    for r in records:
        if r.batch_size != default_batch_size or not r.reached:
            continue
        thr = by_limit.get(r.power_limit) if r.power_limit is not None else None
        times.append(r.time * thr / top if thr is not None and top is not None else r.time)
    return sum(times) / len(times) if times else None


@dataclass(frozen=True)
class SlowdownCharge:
    """Charges each ended trial the ``max-slowdown`` cost against the history so far (the engine's ``charge``).

    Idempotent: a record's cost is recomputed from its energy and time (a replay of an already
    charged record charges it the same). Skipped and unobserved trials keep their cost.

    Attributes:
        objective: A ``max-slowdown`` objective.
        default_batch_size: b0.
        profile: Reads b0's power profile on the job's GPU model, as stored when the trial ends
            (the run directory's ``power_profiles.json``; traces in simulation); None or an empty
            profile: times count as at the max limit.
    """

    objective: Objective
    default_batch_size: int
    profile: Callable[[], Sequence[PowerLimitMeasurement] | None] | None = None

    def __call__(self, history: Sequence[TrialRecord], record: TrialRecord) -> TrialRecord:
        if self.objective.kind != "max-slowdown" or record.stop_reason == "skipped" or not record.observed:
            return record
        profile = (self.profile() if self.profile is not None else None) or ()
        ref = history_reference_time([*history, record], self.default_batch_size, profile)
        cost = self.objective.trial_cost(record.energy, record.time, record.max_power, ref)
        return record if cost == record.cost else dataclasses.replace(record, cost=cost)


def parse_objective(text: str) -> Objective:
    """An objective from its ``--objective`` text.

    Forms: ``cost`` (eta 0.5), ``cost=ETA``, ``energy``, ``time``, ``max-slowdown=FACTOR``.

    Raises:
        ObjectiveError: Not one of those forms.
    """
    kind, _, value = text.strip().partition("=")
    kind = kind.strip().lower()
    fix = "use cost=0.5, energy, time or max-slowdown=1.1"
    if kind not in KINDS:
        raise ObjectiveError(f"--objective {text!r}: unknown kind {kind!r}; {fix}")
    if kind in ("energy", "time"):
        if value:
            raise ObjectiveError(f"--objective {text!r}: {kind} takes no value; {fix}")
        return Objective(kind)
    if kind == "cost" and not value:
        return Objective("cost")
    if not value:
        raise ObjectiveError(f"--objective {text!r}: max-slowdown needs a factor; {fix}")
    try:
        number = float(value)
    except ValueError:
        raise ObjectiveError(f"--objective {text!r}: {value!r} is not a number; {fix}") from None
    return Objective("cost", eta=number) if kind == "cost" else Objective("max-slowdown", factor=number)


def charge_for(
    objective: Objective,
    default_batch_size: int,
    profile: Callable[[], Sequence[PowerLimitMeasurement] | None] | None = None,
) -> SlowdownCharge | None:
    """The engine's ``charge`` for ``objective`` (None: the executor's cost stands, every kind but ``max-slowdown``)."""
    return SlowdownCharge(objective, default_batch_size, profile) if objective.kind == "max-slowdown" else None
