"""Choosing a run directory, and picking a run up after a crash: the resume policy over `zeus_run.rundir.store` (storage).

* `choose_run_dir`: the spec's run directory, resumed when its stored spec
  agrees on every decision setting (`compatibility`); otherwise refused, or a
  sibling (the one an earlier ``--force`` started for this spec, if any).
  Without a stored spec the history itself is checked (`history_mismatches`):
  a replay of every decision under `zeus_run.engine.knobs.Knobs.from_spec`.
* `recover`: read the history (cutting a torn tail) and, if the launcher died
  with trials in flight (``running.json`` is still there), let the executors
  adopt every trial that goes on or has already written its outcome, and record
  each other one as interrupted with everything the engine had decided for it,
  so that replay audits it like any other.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zeus_run.contract import RunningMarker, StopReason, TrialFiles, TrialOutcome, reaches_target
from zeus_run.cost import zeus_cost
from zeus_run.engine.core import TrialRequest
from zeus_run.engine.knobs import Knobs
from zeus_run.engine.record import Measurement, trial_record
from zeus_run.engine.replay import audit
from zeus_run.errors import HistoryError, RunDirError
from zeus_run.optimizer import Decision
from zeus_run.records import TrialRecord
from zeus_run.rundir.history import HISTORY_NAME, HistoryStore
from zeus_run.rundir.settings import read_settings
from zeus_run.rundir.store import SPEC_NAME, RunDir, fresh_sibling, read_running
from zeus_run.spec import DECISION_FIELDS, JobSpec, OptimizerSettings

logger = logging.getLogger(__name__)

__all__ = [
    "choose_run_dir",
    "compatibility",
    "history_mismatches",
    "interrupted_record",
    "keep_recorded_warm_start",
    "pending_records",
    "recover",
    "request_of",
    "spec_differences",
]


# -- choosing, checking and resuming a run directory ---------------------------------------


def choose_run_dir(spec: JobSpec, run_dir: Path | None, new: bool, force: bool) -> tuple[Path, bool]:
    """Pick the run directory: the spec's (or ``run_dir``), or a sibling ``NAME-2``, ``NAME-3``, ...

    The same command on the same spec always picks the same directory: with
    ``force``, a sibling an earlier ``--force`` started for this spec is
    resumed rather than a new one started on every call.

    Returns:
        The directory and whether it already holds a compatible history to resume.

    Raises:
        RunDirError: The existing history was recorded under different
            decision settings and neither ``new`` nor ``force`` was given.
        HistoryError: The existing history is damaged.
    """
    base = Path(run_dir).absolute() if run_dir is not None else spec.run_dir.absolute()
    if base.exists() and not base.is_dir():
        what = "--run-dir" if run_dir is not None else "run_dir"
        raise RunDirError(
            f"{what} = {str(base)!r}: it exists and is not a directory. Give {what} the path of a directory "
            "(it is created if it does not exist)."
        )
    if new:
        return fresh_sibling(base), False
    try:
        diffs, has_history = compatibility(base, spec)
    except RunDirError:
        if not force:
            raise
        diffs, has_history = ["damaged"], True
    if not diffs:
        return base, has_history
    if force:
        for sibling in _siblings(base):
            try:
                sib_diffs, sib_history = compatibility(sibling, spec)
            except (RunDirError, HistoryError):
                continue
            if not sib_diffs:
                logger.info("resuming %s, the run directory an earlier --force started for this spec", sibling)
                return sibling, sib_history
        return fresh_sibling(base), False
    lines = "\n".join(f"  - {d}" for d in diffs)
    raise RunDirError(
        f"The run in {str(base)!r} was recorded with different settings, so its history cannot be resumed:\n{lines}\n"
        "Restore those settings to resume, or pass --force to start a new run directory next to it "
        "(the old history is kept; the same command with --force resumes that new directory next time)."
    )


def compatibility(path: Path, spec: JobSpec) -> tuple[list[str], bool]:
    """Why ``spec`` cannot continue the run in ``path`` (empty if it can), and whether it has history.

    With a stored ``spec.yaml`` its decision settings are compared. Without one
    (deleted) the history itself is checked against ``spec``: batch sizes,
    costs under ``eta``, targets, and a replay of every decision.

    Raises:
        RunDirError: ``spec.yaml`` is damaged.
        HistoryError: The history is damaged.
    """
    stored = read_settings(path)
    records = list(HistoryStore(path / HISTORY_NAME).read(warn=False)) if (path / HISTORY_NAME).is_file() else []
    if stored is not None:
        diffs = spec_differences(stored, spec)
        if not diffs:
            diffs = [f"{SPEC_NAME} matches, but {p}" for p in history_mismatches(records, spec, full=False)]
        return diffs, bool(records)
    if not records:
        return [], False
    problems = history_mismatches(records, spec, full=True, path=path)
    if problems:
        return [f"{SPEC_NAME} is missing, and the history does not follow from this spec: {problems[0]}"], True
    logger.warning(
        "%s is missing from %s; its %d record(s) agree with this spec, so the run resumes (the spec is saved again)",
        SPEC_NAME,
        path,
        len(records),
    )
    return [], True


def history_mismatches(records: list[TrialRecord], spec: JobSpec, full: bool, path: Path | None = None) -> list[str]:
    """Ways in which ``records`` could not have been produced under ``spec``.

    Args:
        path: The run directory, whose trials in flight (``running.json``) are audited too.
        records: The history.
        spec: The job spec to continue with.
        full: Check everything the history shows (used when ``spec.yaml`` is
            gone); otherwise only what would stop the optimizer from folding it.
    """
    out = []
    for i, r in enumerate(records):
        if r.batch_size not in spec.batch_sizes:
            out.append(f"line {i + 1}: batch size {r.batch_size} is not one of {list(spec.batch_sizes)}")
        elif full and r.trial != i:
            out.append(f"line {i + 1}: trial #{r.trial} is out of order")
    if out or not full:
        return out
    observed = 0
    for i, r in enumerate(records):
        if r.kind == "real" and r.seed is not None and r.seed != spec.seed + observed:
            out.append(f"line {i + 1}: the script's seed {r.seed} is not seed={spec.seed} + {observed} trials")
            break
        observed += r.observed
        if r.kind == "real" and r.observed and r.stop_reason is not StopReason.SKIPPED:
            expected = zeus_cost(r.energy, r.time, spec.eta, r.max_power)
            if not math.isclose(r.cost, expected, rel_tol=1e-6, abs_tol=1e-6):
                out.append(
                    f"line {i + 1}: its cost {r.cost:g} J is not eta={spec.eta:g} x energy + ... ({expected:g} J)"
                )
                break
        if r.kind == "real" and r.epochs > spec.max_epochs:
            out.append(f"line {i + 1}: {r.epochs} epochs is more than max_epochs={spec.max_epochs}")
            break
        hit = any(reaches_target(m, spec.target_metric, spec.higher_is_better) for m in r.metrics)
        if r.kind == "real" and r.metrics and hit != r.reached:
            out.append(
                f"line {i + 1}: its metrics {list(r.metrics)} {'do not reach' if r.reached else 'reach'} the target"
            )
            break
    if out:
        return out
    result = audit(records, Knobs.from_spec(spec, path), pending_records(path, records) if path is not None else [])
    if result.divergence is not None:
        out.append(f"replaying its decisions diverges at {result.divergence.describe()}")
    return out


def keep_recorded_revision(spec: JobSpec, path: Path) -> JobSpec:
    """``spec``, going on under the optimizer revision its run directory was recorded with, when the spec leaves
    ``optimizer.revision`` at its default.

    A new default revision (a zeus-run upgrade) then never stops a recurring job whose history was decided
    under an older one: the history goes on deciding as it was recorded, and replays exactly. A spec that
    names another revision than the default is compared as it is (`spec_differences`), and ``--force`` (which
    never calls this) starts a run directory next to it under the spec's revision.
    """
    try:
        stored = read_settings(path)
    except RunDirError:
        return spec  # compared as it is: `compatibility` says what is wrong with it
    opt = stored.get("optimizer") if stored else None
    if not isinstance(opt, dict) or opt.get("policy") != spec.optimizer.policy:
        return spec
    recorded = opt.get("revision", 1)  # recorded before revisions: 1
    default = OptimizerSettings.for_policy(spec.optimizer.policy).revision
    if not isinstance(recorded, int) or recorded == spec.optimizer.revision or spec.optimizer.revision != default:
        return spec
    logger.info(
        "%s was recorded under %s revision %d: it goes on under revision %d (the job spec leaves "
        "optimizer.revision at its default, %d; --force starts a run directory next to it under revision %d)",
        path,
        spec.optimizer.policy,
        recorded,
        recorded,
        default,
        default,
    )
    return dataclasses.replace(spec, optimizer=dataclasses.replace(spec.optimizer, revision=recorded))


def keep_recorded_warm_start(spec: JobSpec, path: Path) -> JobSpec:
    """``spec``, going on from the warm start its run directory was started with when the spec names none.

    ``zeus-run run job.yaml --warm-from SOURCE`` starts a run directory warm; later runs, asks and
    ``--next`` triggers of the same spec without the option go on with the same source (its copy in
    the run directory: `zeus_run.engine.warm`). A spec that names another source is compared as it is.
    """
    if spec.optimizer.warm_from is not None:
        return spec
    try:
        stored = read_settings(path)
    except RunDirError:
        return spec
    opt = stored.get("optimizer") if stored else None
    if not isinstance(opt, dict) or not isinstance(opt.get("warm_from"), str):
        return spec
    recorded = opt["warm_from"]
    if opt.get("policy") != spec.optimizer.policy:
        return spec
    logger.info("%s was started warm from %s: it goes on from it", path, recorded)
    return dataclasses.replace(spec, optimizer=dataclasses.replace(spec.optimizer, warm_from=recorded))


def spec_differences(stored: dict[str, Any], spec: JobSpec) -> list[str]:
    """Decision-relevant settings that differ between a stored and a new spec."""
    new = spec.to_dict()
    if isinstance(stored.get("optimizer"), dict) and "revision" not in stored["optimizer"]:
        stored = {**stored, "optimizer": {**stored["optimizer"], "revision": 1}}  # recorded before revisions
    out = []
    for key in DECISION_FIELDS:
        old_v, new_v = stored.get(key), new.get(key)
        if isinstance(old_v, dict) and isinstance(new_v, dict):
            for sub in sorted(set(old_v) | set(new_v), key=str):
                if old_v.get(sub) != new_v.get(sub):
                    out.append(f"{key}.{sub}: {old_v.get(sub)!r} -> {new_v.get(sub)!r}")
        elif old_v != new_v:
            out.append(f"{key}: {old_v!r:.200} -> {new_v!r}")
    return out


def _siblings(base: Path) -> list[Path]:
    pattern = re.compile(re.escape(base.name) + r"-([0-9]{1,6})")
    try:
        names = [(int(m.group(1)), e.name) for e in base.parent.iterdir() if (m := pattern.fullmatch(e.name))]
    except OSError:
        return []
    return [base.with_name(name) for _, name in sorted(names) if (base.parent / name).is_dir()]


# -- after a crash ---------------------------------------------------------------------------


def recover(rd: RunDir, spec: JobSpec, cleanup: Callable[[list[RunningMarker]], set[int]]) -> Recovered:
    """Read the history, cutting a torn tail, and settle the trials a dead launcher had in flight.

    Asks in flight (ask/tell, `zeus_run.contract.RunningMarker.asked`) are left as they are:
    their leases settle them (`zeus_run.asktell`). Every trial in flight that the executors adopt (its job and agent are alive, or
    its outcome is written) goes on: it is not recorded here, stays marked in
    ``running.json`` and is returned, so that the engine counts it as in flight with
    the decision it was started with. Every other one is recorded as interrupted.

    Decisions stay reproducible: a record's place in ``history.jsonl`` is the order
    it was folded in, and a concurrent record carries how many records its decision
    had seen (``seen``) and the trials then in flight, so `zeus_run.engine.replay.audit`
    re-derives each decision whatever order the adopted trials end in.

    Args:
        rd: The opened run directory.
        spec: The job.
        cleanup: The executors' `zeus_run.executors.RealExecutor.recover`: stops what
            the dead launcher's trials left running (given their markers), and returns
            the ``trial`` of each one it adopts.
    """
    rd.history.repair_tail()
    history = list(rd.history.read())
    markers = rd.running_trials()
    if markers is None:
        return Recovered(history, [])
    # Asks in flight (ask/tell) have no launcher: their leases settle them (`zeus_run.asktell`).
    asks = [m for m in markers if m.asked]
    markers = [m for m in markers if not m.asked]
    markers = [
        m
        if m.token or m.event_log
        else dataclasses.replace(m, event_log=str(rd.trial_dir(m.recurrence, m.attempt) / TrialFiles.EVENTS))
        for m in markers
    ]
    recorded = {r.trial for r in history}
    pending = [m for m in sorted(markers, key=lambda m: m.trial) if m.trial not in recorded]
    adopted_ids = cleanup(pending)
    adopted = []
    for m in pending:
        if m.trial in adopted_ids:
            logger.info(
                "recurrence %d try %d was running when the launcher stopped and goes on; this launcher takes it over",
                m.recurrence,
                m.attempt,
            )
            adopted.append(m)
            continue
        record = interrupted_record(spec, m)
        logger.warning(
            "recurrence %d try %d was running when the launcher stopped; recorded as interrupted and re-run",
            record.recurrence,
            record.attempt,
        )
        rd.history.append(record)
        history.append(record)
    # NOTE: one atomic rewrite, after the records: a launcher killed at any point of the
    # recovery leaves every trial either recorded or still marked (never neither).
    rd.replace_running([*adopted, *asks])
    return Recovered(history, adopted)


@dataclasses.dataclass(frozen=True)
class Recovered:
    """What `recover` found.

    Attributes:
        history: Every record, in the order they were folded (interrupted trials included).
        adopted: The trials in flight that go on, in trial order (`request_of` turns each
            back into the engine's request).
    """

    history: list[TrialRecord]
    adopted: list[RunningMarker]


def request_of(marker: RunningMarker, spec: JobSpec) -> TrialRequest:
    """The engine's request of an adopted trial, from its marker: the decision it was started with."""
    return TrialRequest(
        recurrence=marker.recurrence,
        attempt=marker.attempt,
        trial=marker.trial,
        observed=(marker.seed - spec.seed) if marker.seed is not None else 0,
        decision=Decision(marker.batch_size, marker.stage, marker.detail),
        cost_threshold=marker.threshold,
        seen=marker.seen or 0,
        in_flight=marker.in_flight,
        draw=marker.draw,
        probe=marker.probe,
        horizon=marker.horizon,
        curve_stop=marker.curve_stop,
        lifetime=marker.lifetime,
    )


def pending_records(path: Path, records: list[TrialRecord]) -> list[TrialRecord]:
    """The trials a run directory's ``running.json`` names that ``records`` do not hold yet, as records of
    their decision (for `zeus_run.engine.replay.audit`'s ``in_flight``)."""
    recorded = {r.trial for r in records}
    job = records[0].job if records else ""
    return [marker_record(job, m) for m in read_running(path) or [] if m.trial not in recorded]


def interrupted_record(spec: JobSpec, marker: RunningMarker) -> TrialRecord:
    """The record of a trial whose launcher died, from its marker: the engine's decision, no outcome."""
    return marker_record(spec.name, marker)


def marker_record(job: str, marker: RunningMarker) -> TrialRecord:
    """A trial's record from its ``running.json`` marker alone: its decision, interrupted, not observed."""
    decision = TrialRequest(
        recurrence=marker.recurrence,
        attempt=marker.attempt,
        trial=marker.trial,
        observed=0,  # not recorded
        decision=Decision(marker.batch_size, marker.stage, marker.detail),
        cost_threshold=marker.threshold,
    )
    nothing = TrialOutcome(
        epochs=0,
        time=0.0,
        energy=0.0,
        max_power=marker.max_power,
        cost=0.0,
        reached=False,
        stop_reason=StopReason.INTERRUPTED,
        exit_code=None,
    )
    return trial_record(
        job,
        decision,
        nothing,
        Measurement(marker.energy_source, marker.estimated),
        **marker_fields(marker),
        message=f"the launcher (pid {marker.pid}) died during this trial; it was not fed to the optimizer",
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
