"""What the engine asks an executor to run: one trial's decision and the context it was taken in."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from zeus_run.optimizer import Decision
from zeus_run.records import TrialRecord
from zeus_run.spec import DEFAULT_LIFETIME


@dataclass(frozen=True)
class TrialRequest:
    """What the engine asks an executor to run.

    Attributes:
        recurrence: 1-based recurrence number.
        attempt: 1-based try within the recurrence.
        trial: 0-based index of the trial in the run, in the order trials start; the executor
            copies it into the record (that is how a concurrent engine knows which trial ended).
        observed: Number of observations the optimizer has seen (seeds per-trial randomness).
        decision: The optimizer's choice.
        cost_threshold: Early-stop threshold (unit: J; inf: none).
        seen: Records folded when it was decided (a prefix of the history).
        in_flight: ``trial`` of each trial running when it was decided, ascending.
        draw: Index of the optimizer's random draw (0 unless others at the same
            observation count are in flight).
        probe: Whether it is the trial pruning exploration waits for.
        horizon: Recurrences the optimizer planned over (`zeus_run.records.TrialRecord.horizon`).
        lifetime: An open-ended job's expected recurrences the optimizer planned over (``horizon``
            None), when not the default (`zeus_run.records.TrialRecord.lifetime`).
        curve_stop: Whether the trial may also be stopped by its learning curve
            (`zeus_run.optimizer.early_stop.cannot_reach`): a probe under a policy whose rule has it.
    """

    recurrence: int
    attempt: int
    trial: int
    observed: int
    decision: Decision
    cost_threshold: float
    seen: int = 0
    in_flight: tuple[int, ...] = ()
    draw: int = 0
    probe: bool = False
    horizon: int | None = None
    curve_stop: bool = False
    lifetime: int | None = None

    def stamp(self, record: TrialRecord) -> TrialRecord:
        """``record`` with this decision's context, as concurrent runs record every trial.

        An executor that writes a record itself (e.g. for a trial whose launcher
        died) must stamp it too, or the audit cannot re-derive the decision.
        """
        return dataclasses.replace(record, seen=self.seen, in_flight=self.in_flight, draw=self.draw, probe=self.probe)


@dataclass(frozen=True)
class Horizon:
    """What the optimizer plans over: the job's recurrences, or an open-ended job's expected lifetime.

    It is the job's (its spec's ``recurrences`` and ``lifetime``), never one invocation's: ``run -n``,
    ``--next``, ask, ``exec``, the `Job` API and the server decide alike on the same history.

    Attributes:
        recurrences: The job's recurrences (None: open-ended).
        lifetime: The recurrences an open-ended job is expected to live (unused with ``recurrences``).
    """

    recurrences: int | None
    lifetime: int = DEFAULT_LIFETIME

    @classmethod
    def of(cls, record: TrialRecord) -> Horizon:
        """The horizon ``record`` was decided under (no ``lifetime``: `DEFAULT_LIFETIME`, as before lifetimes existed)."""
        return cls(record.horizon, record.lifetime or DEFAULT_LIFETIME)


#: A serial executor: runs one trial to its end and returns its record.
