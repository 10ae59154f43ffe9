"""``running.json``: the trials in flight (`RunningMarker`), validated on read (the file is untrusted)."""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

# -- running.json -----------------------------------------------------------------------------

#: ``RunningMarker.executor`` of an ask in flight (ask/tell): no launcher watches it; its lease does.
ASK_EXECUTOR = "ask"

#: Largest whole number a marker field may hold.
_MAX_INT = 2**63 - 1


@dataclass(frozen=True)
class RunningMarker:
    """One trial in flight as ``running.json`` records it: everything the engine decided for it
    (so a launcher killed mid-trial leaves a record replay can audit), how it is measured, and
    what the executor needs to find it again.

    Attributes:
        recurrence: 1-based recurrence number.
        attempt: 1-based try within it.
        trial: 0-based trial number.
        batch_size: The decided batch size.
        stage: Optimizer stage that chose it.
        detail: The optimizer's reason.
        cost_threshold: Early-stop threshold (unit: J), None if none.
        learning_rate: Learning rate passed to the script, if any.
        seed: Seed passed to the script.
        started_at: ISO-8601 start time.
        pid: The launcher's pid.
        energy_source: Energy source name.
        estimated: Whether energy is an estimate.
        max_power: Max power used in the cost (unit: W).
        token: The trial's process marker (``ZEUS_TRIAL_TOKEN``).
        event_log: The script's event log (markers from before trial tokens).
        seen, in_flight, draw, probe: Concurrent runs: the decision's context
            (`zeus_run.engine.core.TrialRequest.stamp`).
        horizon: Recurrences the optimizer planned over when it decided.
        lifetime: An open-ended job's expected recurrences the optimizer planned over (``horizon`` None).
        curve_stop: The trial may also be stopped by its learning curve (`zeus_run.trial.stop.StopRule`); a
            tell judges an ask's trial by the same rule.
        executor: The executor that ran it (``local``, ``slurm``).
        slot: Local concurrency: its slot.
        job_name, job_prefix, trial_dir, slurm_job_id, heartbeat_timeout: Slurm: what finds its job again.
        lease: Ask/tell (``executor`` ``ask``): seconds the ask lives without a heartbeat or a tell.
        asked_at: Ask/tell: when it was asked (Unix time, unit: s).
        host: Ask/tell: the host that asked.
        request_key: Ask/tell: the ask's idempotency key and request fingerprint (`zeus_run.asktell._keys`),
            kept with the ask it made so that a retried ask gets the same trial back.
    """

    recurrence: int
    attempt: int
    trial: int
    batch_size: int
    stage: str = ""
    detail: str = ""
    cost_threshold: float | None = None
    learning_rate: float | None = None
    seed: int | None = None
    started_at: str | None = None
    pid: int | None = None
    energy_source: str = ""
    estimated: bool = False
    max_power: float = 0.0
    token: str | None = None
    event_log: str | None = None
    seen: int | None = None
    in_flight: tuple[int, ...] = ()
    draw: int = 0
    probe: bool = False
    horizon: int | None = None
    executor: str | None = None
    slot: int | None = None
    job_name: str | None = None
    job_prefix: str | None = None
    trial_dir: str | None = None
    slurm_job_id: str | None = None
    heartbeat_timeout: float | None = None
    lease: float | None = None
    asked_at: float | None = None
    host: str | None = None
    request_key: str | None = None
    curve_stop: bool = False
    lifetime: int | None = None

    #: Fields that name the decision: a trial taken over must agree on each of them.
    DECISION: ClassVar[tuple[str, ...]] = (
        *("recurrence", "attempt", "trial", "batch_size", "seed", "cost_threshold", "learning_rate"),
        *("seen", "in_flight", "draw", "probe", "horizon", "lifetime"),
    )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; unset optional fields are left out."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None or (f.name == "in_flight" and self.seen is None):
                continue
            out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    @classmethod
    def from_json(cls, data: Any) -> RunningMarker | None:
        """A marker from untrusted JSON: fields of the wrong type or out of range are dropped.

        Returns:
            None when it is not an object or a required field (``recurrence``, ``attempt``,
            ``trial``, ``batch_size``) is missing or damaged.
        """
        if not isinstance(data, dict):
            return None
        kwargs: dict[str, Any] = {}
        for name, base in _kinds():
            v = data.get(name)
            if v is not None and _fits(base, v):
                kwargs[name] = tuple(v) if isinstance(v, list) else v
        if not all(k in kwargs for k in ("recurrence", "attempt", "trial", "batch_size")):
            return None
        if kwargs["recurrence"] < 1 or kwargs["attempt"] < 1 or kwargs["batch_size"] < 1:
            return None
        return cls(**kwargs)

    @property
    def asked(self) -> bool:
        """Whether it is an ask in flight (ask/tell: `zeus_run.asktell`), not a launcher's trial."""
        return self.executor == ASK_EXECUTOR

    @property
    def threshold(self) -> float:
        """The cost threshold (unit: J; inf: none)."""
        return math.inf if self.cost_threshold is None else self.cost_threshold

    def stamp(self) -> dict[str, Any]:
        """The decision context a concurrent run's record carries (empty for a serial run)."""
        if self.seen is None:
            return {}
        return {"seen": self.seen, "in_flight": self.in_flight, "draw": self.draw, "probe": self.probe}

    def differences(self, other: RunningMarker) -> list[str]:
        """The decision fields in which ``other`` differs, as ``name old -> new``."""
        return [
            f"{k} {getattr(self, k)!r} -> {getattr(other, k)!r}"
            for k in self.DECISION
            if getattr(self, k) != getattr(other, k)
        ]


@functools.cache
def _kinds() -> tuple[tuple[str, str], ...]:
    """Each marker field's name and type as `_fits` reads it (``int``, ``float``, ``str``, ``bool``, ``tuple...``)."""
    fields = dataclasses.fields(RunningMarker)
    return tuple((f.name, str(f.type).replace(" ", "").removesuffix("|None")) for f in fields)


def _fits(base: str, v: Any) -> bool:
    """Whether a JSON value fits a marker field's type (`_kinds`: no bools for numbers, finite, in range)."""
    if base == "bool":
        return isinstance(v, bool)
    if isinstance(v, bool):
        return False
    if base == "int":
        return isinstance(v, int) and 0 <= v <= _MAX_INT
    if base == "float":
        return isinstance(v, (int, float)) and math.isfinite(v) and abs(v) <= _MAX_INT
    if base == "str":
        return isinstance(v, str) and len(v) <= 4096
    if base.startswith("tuple"):
        return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v)
    return False


def markers_to_json(markers: list[RunningMarker]) -> Any:
    """``running.json``'s content: one marker as itself, several as ``{"in_flight": [...]}`` in trial order."""
    ordered = sorted(markers, key=lambda m: m.trial)
    return ordered[0].to_json() if len(ordered) == 1 else {"in_flight": [m.to_json() for m in ordered]}


def markers_from_json(data: Any) -> tuple[list[RunningMarker], int]:
    """The markers in ``running.json``'s content, and how many entries were damaged (and dropped)."""
    # NOTE: a marker of a concurrent run has an ``in_flight`` list of its own (trial numbers);
    # only the container has no ``trial``.
    container = isinstance(data, dict) and "trial" not in data and isinstance(data.get("in_flight"), list)
    items = data["in_flight"] if container else [data]
    markers = [RunningMarker.from_json(d) for d in items]
    return [m for m in markers if m is not None], sum(m is None for m in markers)
