"""Choosing a run directory, and picking a run up after a crash: the resume rules over `zeus_run.rundir.store`.

Storage only: nothing here imports the optimizer, the cost or the engine. Where a rule needs them, the
caller passes them in (`zeus_run.door.opening` does, for every door):

* `choose_run_dir`: the spec's run directory, resumed when its stored spec
  agrees on every decision setting (`compatibility`); otherwise refused, or a
  sibling (the one an earlier ``--force`` started for this spec, if any).
  Without a stored spec the history itself is checked by the caller's ``check``
  (`zeus_run.door.opening.history_mismatches`: a replay of every decision).
* `recover`: read the history (cutting a torn tail) and, if the launcher died
  with trials in flight (``running.json`` is still there), let the executors
  adopt every trial that goes on or has already written its outcome, and record
  each other one as interrupted (the caller's ``record_of``: everything the engine had
  decided for it, so that replay audits it like any other).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zeus_run.contract import RunningMarker, TrialFiles
from zeus_run.errors import HistoryError, RunDirError
from zeus_run.records import TrialRecord
from zeus_run.rundir.history import HISTORY_NAME, HistoryStore
from zeus_run.rundir.settings import read_settings
from zeus_run.rundir.store import SPEC_NAME, RunDir, fresh_sibling
from zeus_run.spec import DECISION_FIELDS, JobSpec, OptimizerSettings

logger = logging.getLogger(__name__)

__all__ = [
    "HistoryCheck",
    "choose_run_dir",
    "compatibility",
    "foreign_batch_sizes",
    "keep_recorded_revision",
    "keep_recorded_warm_start",
    "recover",
    "spec_differences",
]

#: How a history with no ``spec.yaml`` beside it is checked against a spec: its problems, in words
#: (`zeus_run.door.opening.history_mismatches`, which replays every decision). Args: the records, the spec,
#: the run directory.
HistoryCheck = Callable[[list[TrialRecord], JobSpec, Path], list[str]]


# -- choosing, checking and resuming a run directory ---------------------------------------


def choose_run_dir(
    spec: JobSpec, run_dir: Path | None, new: bool, force: bool, check: HistoryCheck
) -> tuple[Path, bool]:
    """Pick the run directory: the spec's (or ``run_dir``), or a sibling ``NAME-2``, ``NAME-3``, ...

    The same command on the same spec always picks the same directory: with
    ``force``, a sibling an earlier ``--force`` started for this spec is
    resumed rather than a new one started on every call. ``check`` checks a history
    that has no ``spec.yaml`` (`compatibility`).

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
        diffs, has_history = compatibility(base, spec, check)
    except RunDirError:
        if not force:
            raise
        diffs, has_history = ["damaged"], True
    if not diffs:
        return base, has_history
    if force:
        for sibling in _siblings(base):
            try:
                sib_diffs, sib_history = compatibility(sibling, spec, check)
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


def compatibility(path: Path, spec: JobSpec, check: HistoryCheck) -> tuple[list[str], bool]:
    """Why ``spec`` cannot continue the run in ``path`` (empty if it can), and whether it has history.

    With a stored ``spec.yaml`` its decision settings are compared (and the history's batch sizes,
    `foreign_batch_sizes`). Without one (deleted) the history itself is checked against ``spec`` by
    ``check`` (`zeus_run.door.opening.history_mismatches`: batch sizes, costs under ``eta``, targets,
    and a replay of every decision).

    Raises:
        RunDirError: ``spec.yaml`` is damaged.
        HistoryError: The history is damaged.
    """
    stored = read_settings(path)
    records = list(HistoryStore(path / HISTORY_NAME).read(warn=False)) if (path / HISTORY_NAME).is_file() else []
    if stored is not None:
        diffs = spec_differences(stored, spec)
        if not diffs:
            diffs = [f"{SPEC_NAME} matches, but {p}" for p in foreign_batch_sizes(records, spec)]
        return diffs, bool(records)
    if not records:
        return [], False
    problems = check(records, spec, path)
    if problems:
        return [f"{SPEC_NAME} is missing, and the history does not follow from this spec: {problems[0]}"], True
    logger.warning(
        "%s is missing from %s; its %d record(s) agree with this spec, so the run resumes (the spec is saved again)",
        SPEC_NAME,
        path,
        len(records),
    )
    return [], True


def foreign_batch_sizes(records: list[TrialRecord], spec: JobSpec, in_order: bool = False) -> list[str]:
    """The records whose batch size is not one of ``spec``'s (the optimizer could not fold them), and with
    ``in_order`` those out of trial order, one line each."""
    out = []
    for i, r in enumerate(records):
        if r.batch_size not in spec.batch_sizes:
            out.append(f"line {i + 1}: batch size {r.batch_size} is not one of {list(spec.batch_sizes)}")
        elif in_order and r.trial != i:
            out.append(f"line {i + 1}: trial #{r.trial} is out of order")
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


def recover(
    rd: RunDir,
    cleanup: Callable[[list[RunningMarker]], set[int]],
    record_of: Callable[[RunningMarker], TrialRecord],
) -> Recovered:
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
        cleanup: The executors' `zeus_run.executors.RealExecutor.recover`: stops what
            the dead launcher's trials left running (given their markers), and returns
            the ``trial`` of each one it adopts.
        record_of: The record of a trial that does not go on, from its marker
            (`zeus_run.engine.record.interrupted_record`).
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
        record = record_of(m)
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
        adopted: The trials in flight that go on, in trial order (`zeus_run.engine.request.request_of`
            turns each back into the engine's request).
    """

    history: list[TrialRecord]
    adopted: list[RunningMarker]
