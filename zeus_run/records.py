"""One record format for every trial: real, simulated and replayed.

A `TrialRecord` is one line of ``history.jsonl``. The optimizer learns from a
record through `TrialRecord.observation`; everything else is for people and
for the history table.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from zeus_run.contract import STOP_REASONS as _STOP_REASONS
from zeus_run.contract import StopReason

SCHEMA_VERSION = 1

#: Why a trial ended, ``value -> description`` (`zeus_run.contract.StopReason`).
STOP_REASONS = _STOP_REASONS

KINDS = ("real", "simulated", "replayed")

#: Fields only concurrent runs write (`TrialRecord.seen` ...); absent means serial.
CONCURRENCY_FIELDS = ("seen", "in_flight", "draw", "probe")

#: Fields written only when set (absent: None), so records read as they did before these existed.
OPTIONAL_FIELDS = (
    *CONCURRENCY_FIELDS,
    *("horizon", "reported", "epoch_timing", "after_metrics", "profile_overhead", "lifetime", "recurrence_failed"),
    "window",
    "warm",
    "oom",
    "oom_retry_after",
    *("estimated_energy", "estimated_share"),
)

#: How a real trial's process ended (``TrialRecord.ended``).
ENDINGS = {
    "exited": "ended by itself (after the stop file, if one was created)",
    "sigterm": "ended after zeus-run sent SIGTERM",
    "killed": "killed with SIGKILL after ignoring SIGTERM for kill_grace",
}


@dataclass(frozen=True)
class TrialRecord:
    """One trial of one recurrence.

    Attributes:
        job: Job name.
        recurrence: 1-based recurrence number.
        attempt: 1-based try within the recurrence.
        trial: 0-based index of the trial over the whole run.
        batch_size: Batch size it ran with.
        stage: Optimizer stage that chose it (pruning, explore, thompson; exploit: ``zeus-voi`` revision 10's bandit,
            which earlier records of that revision name thompson).
        epochs: Epochs completed (counted in time and energy).
        time: Wall-clock time counted (unit: s).
        energy: Energy counted (unit: J).
        max_power: Max power used in the cost (unit: W).
        cost: ``eta * energy + (1 - eta) * max_power * time`` (unit: J).
        reached: Whether the target metric was reached.
        stop_reason: A `zeus_run.contract.StopReason` (a plain string is converted).
        observed: Whether the optimizer learns from this trial.
        energy_source: ``nvml``, ``estimate`` (watts x time), ``trace`` or ``replay``.
        estimated: True when energy is an estimate, not a measurement.
        energy_method: How energy was obtained (NVML ``counter``, ``power-sampling``,
            ``counter+power-sampling``; ``watts-x-time`` for the estimate), if recorded.
        kind: ``real``, ``simulated`` or ``replayed``.
        learning_rate: Learning rate passed to the script, if any.
        seed: Seed passed to the script.
        power_limit: GPU power limit it ran at (unit: W), if set.
        cost_threshold: Early-stop threshold in force (unit: J), None if none.
        metrics: Validation metric after each counted epoch.
        exit_code: The script's own exit code (negative: ended by that signal), if it ran.
        ended: How its process ended, a key of `ENDINGS` (real trials).
        after_time: Time between the point the trial was judged at (target, early stop)
            and the script's exit: saving, uploading (unit: s). Not part of ``cost``.
        after_energy: Energy in that time (unit: J). Not part of ``cost``.
        after_metrics: Metrics the script reported after the stop decision, while it finished
            (not counted; evidence that the metric can be read). None: none came.
        provenance: Where it ran: ``zeus_run`` version, ``host``, ``gpus`` (name, uuid),
            ``slurm_job_id`` when there is one.
        started_at: ISO-8601 start time (real trials).
        triggered_at: ISO-8601 time the launcher that ran it was started (a scheduler's trigger).
        ended_at: ISO-8601 end time (real trials).
        log: Trial log path relative to the run directory.
        message: Short explanation (e.g. the tail of a crashed script's log).
        cause: One line naming why a failed trial failed (`zeus_run.contract.crash_cause`).
        detail: The optimizer's reason for the choice.
        seen: Concurrent runs: how many records of ``history.jsonl`` (a prefix: records are
            appended as trials end) the engine had folded when it decided this trial. None
            (serial runs, old records): every record before this one.
        in_flight: Concurrent runs: ``trial`` numbers of the trials running when it was decided.
        draw: Concurrent runs: index of its Thompson draw among decisions at the same
            number of observations (`zeus_run.optimizer.BatchSizeOptimizer.rng`).
        probe: Concurrent runs: whether it is the trial pruning exploration waits for (a
            trial that ran the best known batch size while pruning's was in flight is not).
            None (serial): pruning takes any result of the batch size it expects.
        horizon: The job's ``recurrences`` when it was decided: the optimizer plans
            exploration over the recurrences left (``zeus-voi`` revision 2). None: open-ended
            (see ``lifetime``), or recorded before horizons were.
        lifetime: Open-ended jobs (``recurrences: null``): the recurrences the job was expected to
            live when it was decided (the spec's ``lifetime``), which the optimizer planned over.
            None: a finite ``horizon``, or the default lifetime (`zeus_run.spec.DEFAULT_LIFETIME`, 100,
            which records made before lifetimes existed planned over too).
        reported: Ask/tell: the figures that were reported to ``zeus-run tell`` (``--energy``,
            ``--time``) rather than measured, e.g. ``energy time``. None: everything measured
            (or estimated, as ``estimated`` says).
        epoch_timing: ``burst`` when every epoch's metric arrived at once at the script's exit
            (its output was held in a buffer, `zeus_run.trial.burst`): ``time`` and ``cost`` are
            what the trial cost, but its epochs were not timed, so its time per epoch means
            nothing. None: each epoch was measured when it was read.
        profile_overhead: What this trial's power-limit sweep cost beyond the same work at the limit
            it chose (unit: J of cost, within ``cost``); None: no sweep ended in this trial. ``zeus-voi``
            revision 9 learns the batch size's cost without it.
        recurrence_failed: Set on the try that used up the recurrence's ``max_tries`` without the
            target: the recurrence failed (this says why, e.g. ``2 of max_tries 2 tries without the
            target; the last crashed``) and the job goes on with the next recurrence. None: the
            recurrence reached the target or goes on (or it was recorded before failed recurrences
            were; `zeus_run.engine.ledger.Ledger` then counts its tries against ``max_tries``).
        window: The span its time and energy (with ``after_time`` and ``after_energy``) cover, and who
            measured it: ``by`` (``launcher``, ``agent``: the script's processes from ``launch`` to ``exit``;
            ``script``: the training process measured itself), ``from`` (``launch``, ``process-start``,
            ``previous-trial``: the end of the process's trial before; ``trial``), ``to`` (``exit``,
            ``close``: where the process told it, ``tell``: no reading after its last epoch), and the
            start-up a script charged before it could read its meter (``extended_s``, ``extended_j`` and
            ``extended_at``: ``power-at-start``, ``cpu-time``...; `zeus_run.energy.SelfMeter`). None: not
            said (an unmeasured or simulated trial, or recorded before windows were).
        estimated_energy: The part of ``energy`` + ``after_energy`` that was estimated, not measured (unit: J): the
            start-up of a script that measured itself before its meter could read the counter (``window``'s
            ``extended_j``; `zeus_run.energy.SelfMeter`). None: nothing estimated (or recorded before this was said).
            Where set, ``estimated`` is true.
        estimated_share: ``estimated_energy`` over the trial's whole energy (``energy`` + ``after_energy``).
        warm: The fingerprint (``sha256:...``) of the warm start's source its decision was taken with
            (``optimizer.warm_from``; the run directory keeps a copy: `zeus_run.engine.warm`); None: a
            cold start.
        oom: True on a crash classed as out of memory (CUDA, the CPU's ``MemoryError``, Slurm's
            OUT_OF_MEMORY): the job's batch sizes at least this large run out of memory, so its retry
            and every later decision take a smaller one (`zeus_run.engine.ledger.Ledger`). None: not
            such a crash, or recorded before out-of-memory crashes were marked (they steer nothing).
        oom_retry_after: On an ``oom`` crash: the recurrences that must reach the target after it before its batch
            size may be decided again (doubled with each earlier shut-out of it; `zeus_run.engine.memory`), as the
            spec's ``oom_retry_after`` said when it was recorded. None: never again (recorded before the rule, or
            under ``oom_retry_after: null``).
    """

    job: str
    recurrence: int
    attempt: int
    trial: int
    batch_size: int
    stage: str
    epochs: int
    time: float
    energy: float
    max_power: float
    cost: float
    reached: bool
    stop_reason: StopReason
    observed: bool = True
    energy_source: str = "estimate"
    estimated: bool = False
    kind: str = "real"
    learning_rate: float | None = None
    seed: int | None = None
    power_limit: float | None = None
    energy_method: str | None = None
    cost_threshold: float | None = None
    metrics: tuple[float, ...] = ()
    exit_code: int | None = None
    ended: str | None = None
    after_time: float | None = None
    after_energy: float | None = None
    after_metrics: tuple[float, ...] | None = None
    provenance: dict[str, Any] | None = None
    started_at: str | None = None
    triggered_at: str | None = None
    ended_at: str | None = None
    log: str | None = None
    message: str | None = None
    cause: str | None = None
    detail: str = ""
    schema: int = field(default=SCHEMA_VERSION)
    seen: int | None = None
    in_flight: tuple[int, ...] | None = None
    draw: int | None = None
    probe: bool | None = None
    horizon: int | None = None
    reported: str | None = None
    epoch_timing: str | None = None
    profile_overhead: float | None = None
    lifetime: int | None = None
    recurrence_failed: str | None = None
    window: dict[str, Any] | None = None
    warm: str | None = None
    oom: bool | None = None
    oom_retry_after: int | None = None

    estimated_energy: float | None = None
    estimated_share: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.stop_reason, StopReason):  # a plain string (tests, old callers)
            object.__setattr__(self, "stop_reason", StopReason.parse(self.stop_reason))

    @property
    def epochs_timed(self) -> bool:
        """Whether each epoch was measured when it ended (not read in one burst at the exit: ``epoch_timing``)."""
        return self.epoch_timing is None

    @property
    def estimated_joules(self) -> float:
        """The part of ``energy`` that is an estimate (unit: J): all of it for an estimate whole, the estimated
        start-up (``estimated_energy``, at most ``energy``) for a measured one, else 0."""
        if self.estimated_energy is not None:
            return min(self.estimated_energy, self.energy)
        return self.energy if self.estimated and math.isfinite(self.energy) else 0.0

    @property
    def spent_cost(self) -> float:
        """Cost actually incurred (a ``skipped`` trial never ran: 0, whatever the optimizer was told)."""
        return 0.0 if self.stop_reason is StopReason.SKIPPED else self.cost

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: strict JSON, so non-finite numbers become None (a diverged epoch's NaN metric too)."""
        out = {name: getattr(self, name) for name in _FIELDS}  # every field is a plain value (no asdict copy)
        if self.provenance is not None:
            out["provenance"] = dict(self.provenance)
        if self.window is not None:
            out["window"] = dict(self.window)
        if self.in_flight is not None:
            out["in_flight"] = list(self.in_flight)
        out["metrics"] = [m if math.isfinite(m) else None for m in self.metrics]
        if self.after_metrics is not None:
            out["after_metrics"] = [m if math.isfinite(m) else None for m in self.after_metrics]
        out["stop_reason"] = str(self.stop_reason)
        for key in _FLOATS:
            v = out[key]
            if isinstance(v, float) and not math.isfinite(v):
                out[key] = None
        for key in OPTIONAL_FIELDS:  # e.g. serial records are written as before concurrency fields existed
            if out[key] is None:
                del out[key]
        return out

    @classmethod
    def from_json(cls, data: Any) -> TrialRecord:
        """Parse a dict written by `to_json` (unknown keys from newer versions are ignored).

        Every field is checked, since a history file can be edited or damaged:
        whole numbers are integers (not booleans) in range, numbers are finite,
        strings are strings. ``None`` for ``time``, ``energy`` or ``cost`` reads
        back as infinity and a ``None`` metric as NaN, undoing `to_json`.

        Raises:
            ValueError: It is not an object, a required key is missing, or a field has the wrong type.
        """
        if not isinstance(data, dict):
            raise ValueError(f"not a trial record: a JSON {_json_type(data)}, not an object")
        kwargs = {k: v for k, v in data.items() if k in _KINDS}
        if len(kwargs) < len(_KINDS):  # some optional ones are left out, or a required one is missing
            missing = [name for name in _REQUIRED_FIELDS if name not in kwargs]
            if missing:
                raise ValueError(f"not a trial record: missing {', '.join(missing)}")
        rec = cls(**_checked(kwargs))
        if rec.kind not in KINDS:
            raise ValueError(f"unknown kind {rec.kind!r}")
        return rec


#: Largest whole number a record may hold (batch sizes, counts, seeds, exit codes).
_MAX_INT = 2**63 - 1
#: Least value of whole-number fields (others: any sign).
_INT_MIN: dict[str, int] = {"recurrence": 1, "attempt": 1, "trial": 0, "batch_size": 1, "epochs": 0, "schema": 0}
_INT_MIN.update(seen=0, draw=0, horizon=1, lifetime=1, oom_retry_after=1)
#: Every field's name (`TrialRecord.to_json`).
_FIELDS = tuple(f.name for f in dataclasses.fields(TrialRecord))
#: Number fields written as None when not finite (a required one reads back as infinity).
_FLOATS = tuple(f.name for f in dataclasses.fields(TrialRecord) if str(f.type).split(" ")[0] == "float")


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _json_type(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null", dict: "object"}.get(
        type(value), "number"
    )


def _field_kinds() -> dict[str, tuple[str, bool]]:
    """``name -> (kind, optional)`` from each field's annotation, so new fields are checked too.

    kind is ``int``, ``float``, ``bool``, ``str``, ``floats`` (a tuple of numbers), ``ints``
    (a tuple of trial numbers) or ``dict``.
    """
    kinds = {}
    for f in dataclasses.fields(TrialRecord):
        ann = str(f.type).replace(" ", "")
        optional = ann.endswith("|None")
        base = ann.removesuffix("|None")
        kind = {"tuple[float,...]": "floats", "tuple[int,...]": "ints", "StopReason": "str"}.get(
            base, base.split("[")[0]
        )
        if kind not in ("int", "float", "bool", "str", "floats", "ints", "dict"):
            raise TypeError(f"TrialRecord.{f.name}: no JSON check for type {f.type}")
        kinds[f.name] = (kind, optional)
    return kinds


_KINDS = _field_kinds()
#: Fields a record must have (`TrialRecord.from_json`).
_REQUIRED_FIELDS = tuple(f.name for f in dataclasses.fields(TrialRecord) if _required(f))


def _check_field(key: str, value: Any) -> Any:
    """The field's value, validated against its annotation (see `TrialRecord.from_json`)."""
    kind, optional = _KINDS[key]
    if value is None:
        if optional:
            return None
        if key in _FLOATS:  # a non-finite time, energy or cost
            return math.inf
        raise ValueError(f"not a trial record: {key} is null")
    if kind == "floats":
        if not isinstance(value, list):
            raise ValueError(f"not a trial record: {key} is a {_json_type(value)}, not a list")
        return tuple(math.nan if m is None else _number(key, m) for m in value)
    if kind == "ints":
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _MAX_INT for v in value
        ):
            raise ValueError(f"not a trial record: {key} {value!r:.40} is not a list of trial numbers")
        return tuple(value)
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"not a trial record: {key} {value!r:.40} is not a whole number")
        if not _INT_MIN.get(key, -_MAX_INT) <= value <= _MAX_INT:
            raise ValueError(f"not a trial record: {key} {value} is out of range")
        return value
    if kind == "float":
        return _number(key, value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"not a trial record: {key} {value!r:.40} is not true or false")
        return value
    if kind == "dict":
        if not isinstance(value, dict):
            raise ValueError(f"not a trial record: {key} is a {_json_type(value)}, not an object")
        return value
    if not isinstance(value, str):
        raise ValueError(f"not a trial record: {key} {value!r:.40} is not a string")
    return value


#: Per field: the type a record written by `TrialRecord.to_json` holds there, when one type is the whole check
#: (``float`` also needs a finite value, ``int`` one in range), whether None is allowed, and the least value.
_FAST: dict[str, tuple[type | None, bool, int]] = {
    name: ({"int": int, "float": float, "str": str, "bool": bool}.get(kind), optional, _INT_MIN.get(name, -_MAX_INT))
    for name, (kind, optional) in _KINDS.items()
}


def _checked(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with every value validated (`_check_field`); the common case is decided inline, without a call per
    field, so that a history of 10,000 records is read in a fraction of a second (``scripts/bench_replay.py``)."""
    for key, value in kwargs.items():
        t, optional, lo = _FAST[key]
        expected = type(value) is t  # (a name of its own: mypy would take the test as narrowing value to object)
        if expected:
            if t is float:
                if value - value == 0.0:  # finite (inf - inf and nan - nan are nan)
                    continue
            elif t is not int or lo <= value <= _MAX_INT:
                continue
        elif value is None and optional:
            continue
        kwargs[key] = _check_field(key, value)
    return kwargs


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"not a trial record: {key} {value!r:.40} is not a number")
    try:
        f = float(value)
    except OverflowError:
        raise ValueError(f"not a trial record: {key} is too large") from None
    if not math.isfinite(f):
        raise ValueError(f"not a trial record: {key} {value!r} is not finite")
    return f


@dataclass(frozen=True)
class PowerLimitMeasurement:
    """What running at one power limit looked like.

    Attributes:
        power_limit: The limit (unit: W).
        avg_power: Average power drawn (unit: W).
        throughput: Work per second (any unit, the same for all limits of a profile,
            e.g. iterations/s or epochs/s).
        window_s: Duration of the measurement window (unit: s; None: not measured, e.g. traces).
        samples: Energy-counter updates seen in the window (None: not measured).
    """

    power_limit: float
    avg_power: float
    throughput: float
    window_s: float | None = None
    samples: int | None = None
