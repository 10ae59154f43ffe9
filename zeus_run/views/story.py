"""What ``zeus-run history`` says of a run's life beside its figures, one plain line each.

* `warm_line`: the run started warm, from where, with how many of the source's trials;
* `exploration_line`: why the optimizer did not explore (only the default batch size ran, and its last
  decision said no probe would pay over the recurrences it plans over);
* `launcher_lines`: a trial in flight (its launcher holds the run directory), or orphaned (its launcher is
  gone: the next trigger records it, or takes it over if it finished).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from zeus_run.records import TrialRecord
from zeus_run.rundir.lock import holder_role
from zeus_run.rundir.store import read_running
from zeus_run.views.summary import EXPLORING_STAGES


def story_lines(run_dir: Path, records: Sequence[TrialRecord]) -> list[str]:
    """Every line of the story that applies to ``run_dir`` (its history ``records``), in this order: the warm
    start, why the optimizer did not explore, the trials in flight or orphaned."""
    out = [line for line in (warm_line(run_dir), exploration_line(records)) if line is not None]
    return out + launcher_lines(run_dir)


def warm_line(run_dir: Path) -> str | None:
    """``Started warm from SOURCE: N trial(s) of it ...``, None for a cold start."""
    from zeus_run.engine.warm import WARM_NAME, read_copy
    from zeus_run.errors import ZeusRunError

    try:
        warm = read_copy(run_dir)
    except ZeusRunError as exc:
        return f"Started warm, but its copy ({WARM_NAME}) cannot be read: {exc}"
    if warm is None:
        return None
    n = len(warm.observations)
    reached = sum(o.reached for o in warm.observations)
    return (
        f"Started warm from {warm.source}: {n} trial(s) of it ({reached} reached the target) seed the optimizer; "
        f"its copy is {run_dir / WARM_NAME}."
    )


def exploration_line(records: Sequence[TrialRecord]) -> str | None:
    """Why the optimizer did not explore, when only one batch size ran and it no longer explores; else None."""
    observed = [r for r in records if r.observed and r.kind == "real"]
    if not observed or observed[-1].stage in EXPLORING_STAGES:
        return None
    tried = {r.batch_size for r in observed}
    if len(tried) != 1:
        return None
    last = observed[-1]
    recurrences = len({r.recurrence for r in records})
    plans = (
        f"the {last.horizon} recurrence(s) it plans over"
        if last.horizon is not None
        else f"the {last.lifetime or 100} recurrence(s) an open-ended job is expected to live (lifetime)"
    )
    said = f" (its last decision: {last.detail})" if last.detail else ""
    return (
        f"Did not explore: only batch size {last.batch_size} ran in {recurrences} recurrence(s); no other batch "
        f"size was expected to save more than its probe costs over what is left of {plans}{said}."
    )


def launcher_lines(run_dir: Path) -> list[str]:
    """One line per trial a launcher has in flight (``running.json``), or left orphaned when it died."""
    markers = sorted((m for m in read_running(run_dir) or [] if not m.asked), key=lambda m: m.trial)
    if not markers:
        return []
    alive = holder_role(run_dir) == "run"
    out = []
    for m in markers:
        what = (
            f"recurrence {m.recurrence} try {m.attempt} (trial #{m.trial}), batch size {m.batch_size}, "
            f"started {m.started_at or '?'}"
        )
        who = f"pid {m.pid}" if m.pid is not None else "its launcher"
        if alive:
            out.append(f"In flight: {what}; its launcher ({who}) is running.")
        else:
            out.append(
                f"Orphaned: {what}; its launcher ({who}) is gone (it died). The next trigger records it: "
                "interrupted, or taken over if it finished."
            )
    return out
