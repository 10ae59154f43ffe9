"""The settings that decide a run, built once: `Knobs`.

Run, resume, the history check, replay and simulation all make their engine
through `Knobs.engine`, and build their `Knobs` through `Knobs.from_mapping`
(from a spec: `Knobs.from_spec`; from a run directory: `Knobs.from_run_dir`),
which takes every field by its own name. A new decision setting is a new field
here and a same-named field in the spec: it then reaches every user of `Knobs`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeus_run.engine.core import Engine
from zeus_run.errors import HistoryError
from zeus_run.objective import Objective, charge_for
from zeus_run.optimizer import PowerLimitMeasurement, WarmStart, make_optimizer
from zeus_run.spec import DEFAULT_LIFETIME, DEFAULT_OOM_RETRY_AFTER, OptimizerSettings

if TYPE_CHECKING:
    from zeus_run.spec import JobSpec


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
        max_early_stops: The engine's fallback rule (None: off, as in runs recorded before it existed).
        concurrency: Recurrences in flight at once (1: serial, as in runs recorded before it existed).
        horizon: The job's ``recurrences``, which the optimizer plans over (None: open-ended), whatever
            one invocation runs (``run -n``, ``--next``).
        lifetime: An open-ended job's expected recurrences, which the optimizer plans over instead
            (the spec's ``lifetime``; as in runs recorded before it existed by default).
        objective: The ``objective`` section (None: the ``cost`` objective with ``eta``).
        default_profile: The default batch size's power profile in the run directory
            (``max-slowdown``'s reference scales its times to the max limit with it, as the run did);
            not a spec setting: `from_run_dir` reads it from ``power_profiles.json``.
        control_share: ``saving.control.max_share`` (`zeus_run.engine.control`); None: no control runs, as in runs
            recorded before it existed.
        warm: The warm start's source (``optimizer.warm_from``), as the run directory keeps it
            (`zeus_run.engine.warm`); not a spec setting: `from_run_dir` reads its copy.
        oom_retry_after: Stamped on each out-of-memory crash: the recurrences that must reach the target after it
            before its batch size may be decided again (`zeus_run.engine.memory`); None (a run directory recorded
            before the setting existed): never, as such a run decided.
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
    max_early_stops: int | None = None
    concurrency: int = 1
    horizon: int | None = None
    lifetime: int = DEFAULT_LIFETIME
    objective: Objective | None = None
    default_profile: tuple[PowerLimitMeasurement, ...] = ()
    warm: WarmStart | None = None
    oom_retry_after: int | None = DEFAULT_OOM_RETRY_AFTER
    control_share: float | None = None

    @property
    def goal(self) -> Objective:
        """What the run optimises (``objective``, or ``cost`` with ``eta``)."""
        return self.objective or Objective("cost", eta=self.eta)

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any]) -> Knobs:
        """Every field from the same-named key of ``d`` (a resolved spec as a dict).

        A key that is missing (or null where the field has a default) takes the
        field's default, as in run directories recorded before the field existed.

        Raises:
            KeyError: A field without a default is missing.
            TypeError, ValueError, AttributeError: A value has the wrong type.
        """
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in _CONVERT:  # not a spec setting (`default_profile`)
                continue
            value = d.get(_KEYS.get(f.name, f.name))
            optional = str(f.type).endswith("| None")
            if value is None and not optional:
                if f.default is dataclasses.MISSING:
                    raise KeyError(f.name)
                continue
            kwargs[f.name] = None if value is None else _CONVERT[f.name](value)
        return cls(**kwargs)

    @classmethod
    def from_spec(cls, spec: JobSpec, run_dir: Path | None = None) -> Knobs:
        """The knobs of a validated job spec; with ``run_dir``, also the warm start it keeps (or, where it has no
        copy, the one the spec names: `zeus_run.engine.warm.warm_for`). A run or an ask makes its run directory's
        copy first (`zeus_run.engine.warm.ensure_copy`) and sets ``warm`` to it."""
        knobs = cls.from_mapping(spec.to_dict())
        if run_dir is None:
            return knobs
        from zeus_run.engine.warm import warm_for

        return dataclasses.replace(knobs, warm=warm_for(spec, run_dir))

    @classmethod
    def from_run_dir(cls, run_dir: str | Path, settings: Mapping[str, Any] | None = None) -> Knobs:
        """The knobs of a run directory's ``spec.yaml`` (read by `zeus_run.rundir.settings`, the one reader).

        Args:
            run_dir: The run directory.
            settings: Its settings already read (`zeus_run.rundir.settings.RunSettings.raw`); None: read them.

        Raises:
            HistoryError: It is missing, unreadable, or lacks a setting.
        """
        from zeus_run.engine.warm import read_copy
        from zeus_run.errors import RunDirError
        from zeus_run.rundir.settings import SPEC_NAME, read_settings

        path = Path(run_dir) / SPEC_NAME
        try:
            d = settings if settings is not None else read_settings(Path(run_dir))
            if d is None:
                raise FileNotFoundError(f"no {SPEC_NAME}")
            knobs = cls.from_mapping(d)
            knobs = dataclasses.replace(
                knobs,
                default_profile=_default_profile(Path(run_dir), knobs.default_batch_size),
                warm=read_copy(Path(run_dir)),
            )
            if knobs.optimizer.warm_from is not None and knobs.warm is None:
                raise HistoryError(
                    f"{str(run_dir)!r} was started warm from {knobs.optimizer.warm_from!r}, but its copy of that "
                    "history (warm_from.json) is missing: its decisions cannot be replayed. Restore it from a backup."
                )
            knobs.engine(1)  # the settings must make an optimizer (the file may have been edited)
            if not 0.0 <= knobs.eta <= 1.0:
                raise ValueError(f"eta {knobs.eta} is not in [0, 1]")
            return knobs
        except (OSError, RunDirError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise HistoryError(
                f"Cannot read the run's settings from {str(path)!r} ({type(exc).__name__}: {exc}). "
                "Replay needs the spec.yaml that zeus-run writes into every run directory."
            ) from None

    def to_dict(self) -> dict[str, Any]:
        """A YAML-ready dict that `from_mapping` reads back (a simulated run's ``spec.yaml``)."""
        out = dataclasses.asdict(dataclasses.replace(self, warm=None))
        out["batch_sizes"] = list(self.batch_sizes)
        del out["default_profile"], out["warm"]
        for name, key in _KEYS.items():
            out[key] = out.pop(name)
        share = out.pop("saving")
        out["saving"] = {"control": None if share is None else {"max_share": share}}
        return out

    def engine(
        self, recurrences: int, profile: Callable[[], Sequence[PowerLimitMeasurement] | None] | None = None
    ) -> Engine:
        """The engine these knobs decide with, for ``recurrences`` recurrences.

        Args:
            recurrences: Recurrences to run in all (where the run stops; the optimizer plans over
                `horizon` or `lifetime`, the job's).
            profile: Reads b0's power profile as it is stored now (a live run's power session);
                None: `default_profile`.
        """
        opt = make_optimizer(
            self.optimizer,
            self.batch_sizes,
            self.default_batch_size,
            self.seed,
            self.horizon,
            self.warm,
            self.lifetime,
        )
        charge = charge_for(self.goal, self.default_batch_size, profile or (lambda: self.default_profile))
        return Engine(
            opt,
            recurrences,
            self.max_tries,
            self.beta,
            self.max_early_stops,
            self.concurrency,
            charge,
            self.oom_retry_after,
            self.control_share,
        )


def _default_profile(run_dir: Path, batch_size: int) -> tuple[PowerLimitMeasurement, ...]:
    """``batch_size``'s profile in ``run_dir``'s ``power_profiles.json`` (first GPU model that has one; () if none)."""
    from zeus_run.power import ProfileStore

    for profiles in ProfileStore(run_dir).by_model.values():
        if profiles.get(batch_size):
            return tuple(profiles[batch_size])
    return ()


def _objective(v: Any) -> Objective:
    return v if isinstance(v, Objective) else Objective(**v)


def _control_share(v: Any) -> float | None:
    """``saving.control.max_share`` of a spec's ``saving`` section (None: no control)."""
    control = v.get("control") if isinstance(v, dict) else None
    share = control.get("max_share") if isinstance(control, dict) else None
    return None if share is None else float(share)


def _tuple_of_ints(v: Any) -> tuple[int, ...]:
    return tuple(int(b) for b in v)


def _settings(v: Any) -> OptimizerSettings:
    # A run recorded before optimizer revisions existed replays with revision 1.
    return v if isinstance(v, OptimizerSettings) else OptimizerSettings.for_policy(**{"revision": 1, **v})


#: How each field is read from a spec's value.
_CONVERT: dict[str, Callable[[Any], Any]] = {
    "batch_sizes": _tuple_of_ints,
    "default_batch_size": int,
    "eta": float,
    "beta": float,
    "seed": int,
    "optimizer": _settings,
    "target_metric": float,
    "higher_is_better": bool,
    "max_epochs": int,
    "max_tries": int,
    "max_early_stops": int,
    "concurrency": int,
    "horizon": int,
    "lifetime": int,
    "objective": _objective,
    "oom_retry_after": int,
    "control_share": _control_share,
}

#: Fields whose spec key has another name.
_KEYS = {"horizon": "recurrences", "control_share": "saving"}
