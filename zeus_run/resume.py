"""Choosing a run directory, and picking a run up after a crash (next to `zeus_run.rundir.RunDir`).

* `choose_run_dir` (from `zeus_run.rundir`): the spec's run directory, resumed
  when its stored spec agrees on every decision setting; otherwise refused, or
  a sibling (the one an earlier ``--force`` started for this spec, if any).
* `recover`: read the history (cutting a torn tail) and, if the launcher died
  during a trial (``running.json`` is still there), record that trial as
  interrupted with everything the engine had decided for it, so that replay
  audits it like any other, and let the executor clean up what the dead
  launcher left running (or adopt the trial, which then goes on: a Slurm job).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from zeus_run.records import TrialRecord
from zeus_run.rundir import RunDir, choose_run_dir
from zeus_run.spec import JobSpec

logger = logging.getLogger(__name__)

__all__ = ["choose_run_dir", "interrupted_record", "recover"]


def recover(rd: RunDir, spec: JobSpec, cleanup: Callable[[list[dict[str, Any]], bool], set[int]]) -> list[TrialRecord]:
    """Read the history, cutting a torn tail and recording the trials the launcher died in.

    Args:
        rd: The opened run directory.
        spec: The job.
        cleanup: The executors' `zeus_run.executors.RealExecutor.recover`: stops what
            the dead launcher's trials left running (given their ``running.json``
            entries), and returns the trials it adopts: they go on, are not recorded
            here, and stay marked in flight until the executor picks them up.
            Adopting is allowed only when one trial was in flight and it is the
            next one the history expects (its second argument): with several, the
            trials that started later would not match what the engine decides now.
    """
    rd.history.repair_tail()
    history = list(rd.history.read())
    infos = rd.running_trials()
    if infos is None:
        return history
    for i, info in enumerate(infos):
        if "token" not in info and "recurrence" in info and "attempt" in info:
            trial_dir = rd.trial_dir(int(info["recurrence"]), int(info["attempt"]))
            infos[i] = {**info, "event_log": str(trial_dir / "events.jsonl")}
    rd.clear_running()
    recorded = {r.trial for r in history}
    adopted = cleanup(infos, len(infos) == 1 and infos[0].get("trial") == len(history))
    for info in sorted(infos, key=lambda i: int(i.get("trial", -1))):
        trial = info.get("trial")
        if not isinstance(trial, int) or trial in recorded or "batch_size" not in info:
            continue
        if trial in adopted:
            logger.info(
                "recurrence %s try %s was running when the launcher stopped and goes on; this launcher takes it over",
                info.get("recurrence"),
                info.get("attempt"),
            )
            rd.mark_running(info)
            continue
        record = interrupted_record(spec, info, trial)
        logger.warning(
            "recurrence %d try %d was running when the launcher stopped; recorded as interrupted and re-run",
            record.recurrence,
            record.attempt,
        )
        rd.history.append(record)
        history.append(record)
        recorded.add(trial)
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
        **_stamp(info),
    )


def _stamp(info: dict[str, Any]) -> dict[str, Any]:
    """The decision context a concurrent run's marker carries (`zeus_run.engine.TrialRequest.stamp`)."""
    if "seen" not in info:
        return {}
    return {
        "seen": int(info["seen"]),
        "in_flight": tuple(int(t) for t in info.get("in_flight", ())),
        "draw": int(info.get("draw", 0)),
        "probe": bool(info.get("probe", False)),
    }
