"""The warm start's source, as a run directory keeps it: ``optimizer.warm_from`` (or ``run --warm-from``).

A warm start names the run directory of the same job elsewhere: another GPU, another cluster,
or the run directory the job ran in before a change of its spec forced a new one. Its history
seeds ``zeus-voi``'s walk (`zeus_run.optimizer.voi.warm`).

The source is checked before anything runs (`load_source`): it must be a run directory of the
same job (``name``), reading the same metric (``metric``: source, regex, key, name) towards the
same target (``target_metric``, ``higher_is_better``). Anything else is refused with the field,
the two values and the fix (a `zeus_run.errors.SpecError`: exit code 2).

The first run, ask or exec of a warm run directory copies the source's records into it
(`WARM_NAME`, written once, atomically), with the source's path and a fingerprint of the
records (``sha256:...``). Every later decision, the resumption of a run, and ``replay`` read the
copy, never the source: the audit does not depend on a file that moved, changed or went away.
Every record of the run names the fingerprint (`zeus_run.records.TrialRecord.warm`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeus_run import _fs
from zeus_run.engine.position import observation_of
from zeus_run.errors import HistoryError, RunDirError, SpecError, SpecProblem
from zeus_run.optimizer import WarmStart
from zeus_run.records import TrialRecord

if TYPE_CHECKING:
    from zeus_run.spec import JobSpec

logger = logging.getLogger(__name__)

#: The copy of the source in a warm run directory.
WARM_NAME = "warm_from.json"
#: The fields of ``metric`` that say which metric is read (``path`` may differ from machine to machine).
METRIC_FIELDS = ("source", "regex", "key", "name")
#: Largest copy read back (unit: bytes): a history of 100,000 trials is about 100 MB.
MAX_BYTES = 256 * 1024 * 1024


def fingerprint(records: Sequence[TrialRecord]) -> str:
    """``sha256:`` of the records as JSON lines (sorted keys): what a warm run's records name."""
    h = hashlib.sha256()
    for r in records:
        h.update(json.dumps(r.to_json(), sort_keys=True, separators=(",", ":")).encode())
        h.update(b"\n")
    return "sha256:" + h.hexdigest()


def warm_start(records: Sequence[TrialRecord], source: str) -> WarmStart:
    """The warm start of ``records`` (the source's history, in order) from ``source``."""
    observations = tuple(o for o in (observation_of(r) for r in records) if o is not None)
    return WarmStart(source, fingerprint(records), observations)


def mismatches(settings: Mapping[str, Any], spec: JobSpec, source: str) -> list[SpecProblem]:
    """Why the run directory ``source`` (its ``spec.yaml`` read as ``settings``) is not this job's history elsewhere."""
    out = []
    field = "optimizer.warm_from"
    fix = "Name a run directory of this job (the same name, metric and target) or leave warm_from out for a cold start"
    if settings.get("name") != spec.name:
        out.append(
            SpecProblem(
                field,
                source,
                f"is the run directory of job {settings.get('name')!r}, not of this job ({spec.name!r}): name differs",
                fix,
            )
        )
    raw = settings.get("metric")
    theirs: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    ours = spec.to_dict().get("metric") or {}
    for key in METRIC_FIELDS:
        if theirs.get(key) != ours.get(key):
            out.append(
                SpecProblem(
                    field,
                    source,
                    f"reads another metric: metric.{key} is {theirs.get(key)!r} there, {ours.get(key)!r} here",
                    fix,
                )
            )
    for key in ("target_metric", "higher_is_better"):
        there, here = settings.get(key), getattr(spec, key)
        if there != here and not (isinstance(there, (int, float)) and float(there) == float(here)):
            out.append(
                SpecProblem(field, source, f"aims at another target: {key} is {there!r} there, {here!r} here", fix)
            )
    return out


def load_source(path: str | Path, spec: JobSpec) -> tuple[list[TrialRecord], str]:
    """Read and check the run directory a warm start names.

    Returns:
        Its records, and its path as written into the copy.

    Raises:
        SpecError: It is not a run directory of this job (name, metric, target), or cannot be read.
    """
    from zeus_run.rundir.history import HISTORY_NAME, read_history
    from zeus_run.rundir.settings import SPEC_NAME, read_settings

    p = Path(path)
    label = str(spec.source) if spec.source else "<spec>"
    where = str(p)
    fix = "Name the run directory of this job on another GPU or cluster (it holds spec.yaml and history.jsonl)"
    try:
        settings = read_settings(p) if p.is_dir() else None
    except RunDirError as exc:
        raise SpecError(label, [SpecProblem("optimizer.warm_from", where, f"cannot be read: {exc}", fix)]) from None
    if settings is None or not (p / HISTORY_NAME).is_file():
        why = f"is not a run directory zeus-run recorded (no {SPEC_NAME} and {HISTORY_NAME} in it)"
        raise SpecError(label, [SpecProblem("optimizer.warm_from", where, why, fix)])
    problems = mismatches(settings, spec, where)
    if problems:
        raise SpecError(label, problems)
    try:
        records = list(read_history(p / HISTORY_NAME))
    except HistoryError as exc:
        raise SpecError(
            label, [SpecProblem("optimizer.warm_from", where, f"has a damaged history: {exc}", fix)]
        ) from None
    if not any(r.reached for r in records):
        logger.warning("the warm start's source %s has no trial that reached the target: it teaches little", where)
    return records, where


def write_copy(run_dir: Path, records: Sequence[TrialRecord], source: str) -> WarmStart:
    """Copy the source's records into ``run_dir`` (`WARM_NAME`, atomically) and return its warm start."""
    warm = warm_start(records, source)
    doc = {"source": source, "fingerprint": warm.fingerprint, "records": [r.to_json() for r in records]}
    _fs.atomic_write(run_dir / WARM_NAME, json.dumps(doc, separators=(",", ":")) + "\n")
    logger.info("warm start: %d records of %s copied into %s (%s)", len(records), source, run_dir, warm.fingerprint)
    return warm


def read_copy(run_dir: Path) -> WarmStart | None:
    """The warm start a run directory keeps (None: it has none).

    Raises:
        HistoryError: The copy is damaged (unreadable, not records, or a fingerprint that does not match them).
    """
    p = Path(run_dir) / WARM_NAME
    try:
        with _fs.open_read(p) as f:
            raw = _fs.read_at_most(f, MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise HistoryError(f"Cannot read the warm start's copy {str(p)!r}: {exc}.") from None
    try:
        if len(raw) > MAX_BYTES:
            raise ValueError(f"larger than {MAX_BYTES} bytes")
        doc = json.loads(raw)
        records = [TrialRecord.from_json(r) for r in doc["records"]]
        source, recorded = str(doc["source"]), str(doc["fingerprint"])
    except (ValueError, KeyError, TypeError) as exc:
        raise HistoryError(
            f"The warm start's copy {str(p)!r} is damaged ({exc}). It is what this run's decisions were taken "
            "with: restore it from a backup."
        ) from None
    warm = warm_start(records, source)
    if warm.fingerprint != recorded:
        raise HistoryError(
            f"The warm start's copy {str(p)!r} does not match its fingerprint ({recorded}): it was edited. "
            "Restore it from a backup."
        )
    return warm


def ensure_copy(run_dir: Path, spec: JobSpec) -> WarmStart | None:
    """The warm start of a run directory, its copy written first if the spec names a source it lacks.

    Called with the run directory locked (a launcher, an ask, an exec) before the first decision.

    Raises:
        SpecError: The source is not this job's (`load_source`).
        HistoryError: The copy is damaged.
    """
    warm = read_copy(run_dir)
    if warm is not None or spec.optimizer.warm_from is None:
        return warm
    records, source = load_source(spec.optimizer.warm_from, spec)
    return write_copy(run_dir, records, source)


def warm_for(spec: JobSpec, run_dir: Path | None) -> WarmStart | None:
    """The warm start ``spec`` decides with in ``run_dir``: its copy there, else the source read (not copied)."""
    warm = read_copy(run_dir) if run_dir is not None else None
    if warm is not None or spec.optimizer.warm_from is None:
        return warm
    records, source = load_source(spec.optimizer.warm_from, spec)
    return warm_start(records, source)
