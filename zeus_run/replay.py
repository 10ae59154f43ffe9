"""Replay a recorded run: audit its decisions, or ask what other knobs would have done.

Both re-drive the shared `Engine` from the history alone:

* `audit` feeds the recorded trials back in order and checks that the engine
  asks for exactly what was recorded (recurrence, try, batch size, early-stop
  threshold). The first difference is a divergence.
* `what_if` turns the recorded trials into an empirical trace (per batch size:
  each observed trial's epochs, time and energy) and replays it with changed
  knobs. A batch size the history never observed is unknown: the replay stops
  there and says so rather than inventing an outcome.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from zeus_run.cost import SKIP_PENALTY, epochs_under_threshold, zeus_cost
from zeus_run.engine import Engine, TrialRequest
from zeus_run.errors import ConvergenceError, HistoryError
from zeus_run.optimizer import make_optimizer
from zeus_run.records import TrialRecord
from zeus_run.spec import POLICY_DEFAULTS, OptimizerSettings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Knobs:
    """The settings that decide a run (from the run directory's resolved spec).

    Attributes:
        batch_sizes: Feasible batch sizes.
        default_batch_size: b0.
        eta: Cost knob.
        beta: Early-stop knob (None: off).
        seed: Optimizer seed.
        optimizer: Batch-size optimizer settings.
        target_metric: Converged when the metric reaches this.
        higher_is_better: Direction of the metric.
        max_epochs: Epoch limit.
        max_tries: Counted tries per recurrence.
    """

    batch_sizes: tuple[int, ...]
    default_batch_size: int
    eta: float
    beta: float | None
    seed: int
    optimizer: OptimizerSettings
    target_metric: float
    higher_is_better: bool = True
    max_epochs: int = 100
    max_tries: int = 20

    @classmethod
    def from_run_dir(cls, run_dir: str | Path) -> Knobs:
        """Read ``spec.yaml`` of a run directory.

        Raises:
            HistoryError: It is missing or lacks a setting.
        """
        path = Path(run_dir) / "spec.yaml"
        try:
            d: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            knobs = cls(
                batch_sizes=tuple(d["batch_sizes"]),
                default_batch_size=int(d["default_batch_size"]),
                eta=float(d["eta"]),
                beta=None if d.get("beta") is None else float(d["beta"]),
                seed=int(d["seed"]),
                optimizer=OptimizerSettings.for_policy(**d["optimizer"]),
                target_metric=float(d["target_metric"]),
                higher_is_better=bool(d.get("higher_is_better", True)),
                max_epochs=int(d.get("max_epochs", 100)),
                max_tries=int(d.get("max_tries", 20)),
            )
            knobs.engine(1)  # the settings must make an optimizer (the file may have been edited)
            if not 0.0 <= knobs.eta <= 1.0:
                raise ValueError(f"eta {knobs.eta} is not in [0, 1]")
            return knobs
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise HistoryError(
                f"Cannot read the run's settings from {str(path)!r} ({type(exc).__name__}: {exc}). "
                "Replay needs the spec.yaml that zeus-run writes into every run directory."
            ) from None

    def engine(self, recurrences: int) -> Engine:
        opt = make_optimizer(self.optimizer, self.batch_sizes, self.default_batch_size, self.seed)
        return Engine(opt, recurrences, self.max_tries, self.beta)


# -- audit ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Divergence:
    """The first place a replay disagrees with the record.

    Attributes:
        trial: Index of the record.
        what: The field that differs.
        recorded: Value in the history.
        replayed: Value the replayed optimizer produced.
    """

    trial: int
    what: str
    recorded: Any
    replayed: Any

    def describe(self) -> str:
        return f"trial #{self.trial}: {self.what} recorded {self.recorded!r}, replay gives {self.replayed!r}"


@dataclass(frozen=True)
class AuditResult:
    """Outcome of `audit`: how many records matched, and the first divergence if any."""

    checked: int
    divergence: Divergence | None


class _Diverged(Exception):
    def __init__(self, d: Divergence) -> None:
        self.divergence = d


class _Exhausted(Exception):
    pass


def audit(records: Sequence[TrialRecord], knobs: Knobs) -> AuditResult:
    """Check that re-folding the history reproduces every recorded decision."""
    checked = 0

    def feed(req: TrialRequest) -> TrialRecord:
        nonlocal checked
        if checked >= len(records):
            raise _Exhausted
        rec = records[checked]
        for what, recorded, replayed in (
            ("recurrence", rec.recurrence, req.recurrence),
            ("try", rec.attempt, req.attempt),
            ("batch size", rec.batch_size, req.decision.batch_size),
            ("cost threshold", _thr(rec.cost_threshold), _thr(req.cost_threshold)),
        ):
            same = (
                math.isclose(recorded, replayed, rel_tol=1e-9) if isinstance(recorded, float) else recorded == replayed
            )
            if not same:
                raise _Diverged(Divergence(checked, what, recorded, replayed))
        checked += 1
        return rec

    horizon = max((r.recurrence for r in records), default=0) + 1
    engine = knobs.engine(horizon)
    try:
        while checked < len(records):
            engine.run(records[:checked], feed)
    except _Diverged as d:
        return AuditResult(checked, d.divergence)
    except (_Exhausted, ConvergenceError):
        pass
    return AuditResult(checked, None)


def _thr(v: float | None) -> float:
    return math.inf if v is None else float(v)


# -- what-if ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedPath:
    """One observed trial as a training path: per-epoch time and energy, and when it converged."""

    epochs: int
    reached_at: int | None
    time_per_epoch: float
    energy_per_epoch: float
    max_power: float


@dataclass
class WhatIfResult:
    """What a configuration would have done on the recorded outcomes.

    Attributes:
        records: The replayed trials (kind ``replayed``).
        recurrences: Recurrences replayed to convergence.
        cost: Cumulative cost of the replay (unit: J), under the replay's eta.
        recorded_cost: Cost of the same recurrences as recorded, under the replay's eta.
        unknown: Batch size the replay wanted but the history never observed (replay stopped there).
        stopped_at: Recurrence where it stopped early, if it did.
    """

    records: list[TrialRecord]
    recurrences: int
    cost: float
    recorded_cost: float
    unknown: int | None = None
    stopped_at: int | None = None


class _Unknown(Exception):
    def __init__(self, batch_size: int, recurrence: int) -> None:
        self.batch_size = batch_size
        self.recurrence = recurrence


def empirical_paths(records: Sequence[TrialRecord], knobs: Knobs) -> dict[int, list[RecordedPath]]:
    """Per batch size, the observed trials that ran at least one epoch."""
    paths: dict[int, list[RecordedPath]] = defaultdict(list)
    for r in records:
        if not r.observed or r.epochs <= 0:
            continue
        hit = None
        for i, m in enumerate(r.metrics, start=1):
            if (m >= knobs.target_metric) if knobs.higher_is_better else (m <= knobs.target_metric):
                hit = i
                break
        if hit is None and r.reached:
            hit = r.epochs
        paths[r.batch_size].append(RecordedPath(r.epochs, hit, r.time / r.epochs, r.energy / r.epochs, r.max_power))
    return dict(paths)


class EmpiricalExecutor:
    """Runs trials on recorded paths (an `zeus_run.engine.Executor`)."""

    def __init__(self, paths: dict[int, list[RecordedPath]], knobs: Knobs, seed: int) -> None:
        self.paths = paths
        self.knobs = knobs
        self.rng = np.random.default_rng([seed, 0xE3B])

    def __call__(self, req: TrialRequest) -> TrialRecord:
        bs = req.decision.batch_size
        options = self.paths.get(bs)
        if not options:
            raise _Unknown(bs, req.recurrence)
        p = options[int(self.rng.integers(len(options)))]
        eta = self.knobs.eta
        per_epoch = zeus_cost(p.energy_per_epoch, p.time_per_epoch, eta, p.max_power)
        # What the recording can tell: up to its own epochs (beyond them is unknown and
        # counted as not converging), within max_epochs and the new threshold.
        limit, cut = epochs_under_threshold(req.cost_threshold, per_epoch, min(p.epochs, self.knobs.max_epochs))
        reached = p.reached_at is not None and p.reached_at <= limit
        epochs = p.reached_at if reached else limit
        reason = "target_reached" if reached else ("cost_threshold" if cut else "max_epochs")
        if epochs <= 0:
            reason, epochs = "skipped", 0
        time, energy = epochs * p.time_per_epoch, epochs * p.energy_per_epoch
        cost = zeus_cost(energy, time, eta, p.max_power)
        return TrialRecord(
            job="replay",
            recurrence=req.recurrence,
            attempt=req.attempt,
            trial=req.trial,
            batch_size=bs,
            stage=req.decision.stage,
            epochs=epochs,
            time=time,
            energy=energy,
            max_power=p.max_power,
            cost=cost if reason != "skipped" else SKIP_PENALTY * req.cost_threshold,
            reached=reached,
            stop_reason=reason,
            energy_source="replay",
            kind="replayed",
            cost_threshold=req.cost_threshold if math.isfinite(req.cost_threshold) else None,
            detail=req.decision.detail,
        )


def what_if(records: Sequence[TrialRecord], knobs: Knobs, recurrences: int | None = None) -> WhatIfResult:
    """Replay ``knobs`` on the recorded outcomes.

    Args:
        records: The history.
        knobs: The configuration to evaluate (e.g. the run's knobs with another eta).
        recurrences: Recurrences to replay (default: as many as the history converged).
    """
    recorded_rec = sorted({r.recurrence for r in records if r.reached})
    n = recurrences if recurrences is not None else len(recorded_rec)
    executor = EmpiricalExecutor(empirical_paths(records, knobs), knobs, knobs.seed)
    out: list[TrialRecord] = []
    unknown = stopped = None
    try:
        knobs.engine(n).run([], executor, out.append)
    except _Unknown as u:
        unknown, stopped = u.batch_size, u.recurrence
        logger.info("replay stopped at recurrence %d: batch size %d was never observed", u.recurrence, u.batch_size)
    except ConvergenceError as exc:
        stopped = out[-1].recurrence if out else 1
        logger.info("replay stopped: %s", exc)
    done = sorted({r.recurrence for r in out if r.reached})
    # Compare like with like: the recorded trials of the recurrences the replay completed.
    done_set = set(range(1, len(done) + 1))
    recorded_cost = sum(
        zeus_cost(r.energy, r.time, knobs.eta, r.max_power) for r in records if r.observed and r.recurrence in done_set
    )
    cost = sum(r.spent_cost for r in out if r.recurrence in done_set)
    return WhatIfResult(out, len(done), cost, recorded_cost, unknown, stopped)


def with_changes(knobs: Knobs, **changes: Any) -> Knobs:
    """A copy of ``knobs`` with top-level or optimizer fields replaced (None: unchanged).

    A new ``policy`` comes with its own defaults for the policy-dependent knobs
    (`zeus_run.spec.POLICY_DEFAULTS`) unless they are changed too.
    """
    opt_fields = {f.name for f in dataclasses.fields(OptimizerSettings)}
    top = {k: v for k, v in changes.items() if v is not None and k not in opt_fields}
    opt = {k: v for k, v in changes.items() if v is not None and k in opt_fields}
    settings = knobs.optimizer
    if opt.get("policy", settings.policy) != settings.policy:
        kept = {k: v for k, v in dataclasses.asdict(settings).items() if k not in POLICY_DEFAULTS[opt["policy"]]}
        settings = OptimizerSettings.for_policy(**{**kept, "policy": opt["policy"]})
    return dataclasses.replace(knobs, optimizer=dataclasses.replace(settings, **opt), **top)
