"""Choosing a run directory, and picking a run up after a crash (next to `zeus_run.rundir.RunDir`).

* `choose_run_dir`: the spec's run directory, resumed when its stored spec
  agrees on every decision setting; otherwise refused, or a fresh sibling.
* `recover`: read the history (cutting a torn tail) and, if the launcher died
  during a trial (``running.json`` is still there), record that trial as
  interrupted with everything the engine had decided for it, so that replay
  audits it like any other, and let the executor clean up what the dead
  launcher left running.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zeus_run.errors import RunDirError
from zeus_run.records import TrialRecord
from zeus_run.rundir import RunDir, spec_differences
from zeus_run.spec import JobSpec

logger = logging.getLogger(__name__)


def choose_run_dir(spec: JobSpec, run_dir: Path | None, new: bool, force: bool) -> tuple[Path, bool]:
    """Pick the run directory: the spec's (or ``run_dir``), or a fresh sibling.

    Returns:
        The directory and whether it already holds a compatible history to resume.

    Raises:
        RunDirError: The existing history was recorded under different
            decision settings and neither ``new`` nor ``force`` was given.
    """
    base = Path(run_dir) if run_dir is not None else spec.run_dir
    stored = _stored_spec(base)
    if stored is None and not new:
        return base, False
    if new:
        return _fresh_sibling(base), False
    assert stored is not None
    diffs = spec_differences(stored, spec)
    if not diffs:
        return base, True
    if force:
        return _fresh_sibling(base), False
    lines = "\n".join(f"  - {d}" for d in diffs)
    raise RunDirError(
        f"The run in {str(base)!r} was recorded with different settings, so its history cannot be resumed:\n{lines}\n"
        "Restore those settings to resume, or pass --force to start a new run directory next to it "
        "(the old history is kept)."
    )


def recover(rd: RunDir, spec: JobSpec, cleanup: Callable[[dict[str, Any]], None]) -> list[TrialRecord]:
    """Read the history, cutting a torn tail and recording a trial the launcher died in.

    Args:
        rd: The opened run directory.
        spec: The job.
        cleanup: The executor's `zeus_run.executors.RealExecutor.recover`: stops what
            the dead launcher's trial left running (given its ``running.json``).
    """
    rd.history.repair_tail()
    history = list(rd.history.read())
    info = rd.running()
    if info is None:
        return history
    if "token" not in info and "recurrence" in info and "attempt" in info:
        trial_dir = rd.trial_dir(int(info["recurrence"]), int(info["attempt"]))
        info = {**info, "event_log": str(trial_dir / "events.jsonl")}
    cleanup(info)
    if info.get("trial") == len(history) and "batch_size" in info:
        record = interrupted_record(spec, info, len(history))
        logger.warning(
            "recurrence %d try %d was running when the launcher stopped; recorded as interrupted and re-run",
            record.recurrence,
            record.attempt,
        )
        rd.history.append(record)
        history.append(record)
    rd.clear_running()
    return history


def interrupted_record(spec: JobSpec, info: dict[str, Any], trial: int) -> TrialRecord:
    """The record of a trial whose launcher died, from its ``running.json``: the engine's decision, no outcome."""
    thr = info.get("cost_threshold")
    rec, attempt = int(info["recurrence"]), int(info["attempt"])
    return TrialRecord(
        job=spec.name,
        recurrence=rec,
        attempt=attempt,
        trial=trial,
        batch_size=int(info["batch_size"]),
        stage=str(info.get("stage", "")),
        detail=str(info.get("detail", "")),
        epochs=0,
        time=0.0,
        energy=0.0,
        max_power=float(info.get("max_power", 0.0)),
        cost=0.0,
        reached=False,
        stop_reason="interrupted",
        observed=False,
        energy_source=str(info.get("energy_source", "")),
        estimated=bool(info.get("estimated", False)),
        learning_rate=info.get("learning_rate"),
        seed=info.get("seed"),
        cost_threshold=None if thr is None else float(thr),
        started_at=info.get("started_at"),
        log=f"trials/r{rec:04d}-t{attempt:02d}/output.log",
        message=f"the launcher (pid {info.get('pid')}) died during this trial; it was not fed to the optimizer",
    )


def _stored_spec(path: Path) -> dict | None:
    spec_file = path / "spec.yaml"
    if not spec_file.exists():
        return None
    import yaml

    try:
        return yaml.safe_load(spec_file.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise RunDirError(
            f"Cannot read {str(spec_file)!r} ({exc}). Move the run directory aside or pass --new."
        ) from exc


def _fresh_sibling(base: Path) -> Path:
    if not base.exists() or not any(base.iterdir()):
        return base
    for i in range(2, 10_000):
        cand = base.with_name(f"{base.name}-{i}")
        if not cand.exists():
            logger.info("starting a new run directory %s (the old one is kept)", cand)
            return cand
    raise RunDirError(f"Too many run directories next to {str(base)!r}; clean some up or pass --run-dir.")
