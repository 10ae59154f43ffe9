"""The setting to recommend, and why it may differ from what the optimizer now favours.

A recommendation must agree with the data it is printed next to:

* it never names a batch size whose mean converged cost is higher than the
  default's (the default is recommended instead);
* when the optimizer's own belief (`believed_best`: the batch size it treats
  as best after folding the history exactly as the engine does) is another
  batch size, the recommendation says so and why;
* it never names a batch size that out-of-memory crashes shut out of the
  decisions (`zeus_run.engine.memory`, the rule the decisions obey), and says
  so where the cheapest mean is one of them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zeus_run.engine.knobs import Knobs
    from zeus_run.engine.memory import ShutOut
    from zeus_run.records import TrialRecord
    from zeus_run.views.saving import Saved
    from zeus_run.views.summary import BatchSizeStats

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recommendation:
    """The setting to run this job with.

    Attributes:
        batch_size: Batch size with the lowest mean converged cost (among those with at least
            two converged runs, when any has two), or the default when none is cheaper than it.
        learning_rate: Its learning rate, as zeus-run passed it.
        power_limit: Its power limit (unit: W), None if none was set.
        mean_cost: Its mean converged cost (unit: J).
        runs: Converged runs the mean rests on.
        savings: ``1 - mean_cost / default_mean_cost`` (None without a default mean).
        note: Why it is not simply the cheapest mean, or why the optimizer favours another batch size.
        savings_ci: The 90% interval of ``savings`` (`zeus_run.views.saving`; None: unbounded yet).
        saved: ``savings`` with its interval and what would tell (`zeus_run.views.saving.Saved`).
    """

    batch_size: int
    learning_rate: float | None
    power_limit: float | None
    mean_cost: float
    runs: int
    savings: float | None
    note: str | None = None
    savings_ci: tuple[float, float] | None = None
    saved: Saved | None = None


@dataclass(frozen=True)
class Belief:
    """What the optimizer believes after folding a history (`believed_best`).

    Attributes:
        batch_size: The batch size it treats as best (None: no belief yet, or a policy without one).
        slow: Recurrences that ran slow across the board and were not charged to a batch size
            (`zeus_run.optimizer.early_stop`): recurrence -> slowdown factor.
    """

    batch_size: int | None
    slow: dict[int, float] = field(default_factory=dict)


def recommend(
    stats: Sequence[BatchSizeStats],
    default_mean_cost: float | None,
    default_batch_size: int | None = None,
    belief: int | None = None,
    shut_out: Sequence[ShutOut] = (),
) -> Recommendation | None:
    """The batch size (with its learning rate and power limit) to run with.

    The lowest mean converged cost wins; when some batch size has two or more
    converged runs, a batch size with a single lucky run does not compete. A
    winner whose mean is above the default's gives way to the default.

    Args:
        stats: Per batch size statistics (`zeus_run.views.summary.batch_size_stats`).
        default_mean_cost: The default's mean converged cost (unit: J), if it converged.
        default_batch_size: b0.
        belief: The batch size the optimizer favours (`believed_best`), if known.
        shut_out: The shut-outs in force (`zeus_run.engine.memory.MemoryBans.now`): none of their batch sizes,
            nor any larger, is recommended.
    """
    ceiling = min((x.batch_size for x in shut_out), default=None)

    def runnable(b: int) -> bool:
        return ceiling is None or b < ceiling

    ranked = [s for s in stats if s.mean_cost is not None]
    if any(s.converged >= 2 for s in ranked):
        ranked = [s for s in ranked if s.converged >= 2]
    candidates = [s for s in ranked if runnable(s.batch_size)]
    if not candidates:
        candidates = [s for s in stats if s.mean_cost is not None and runnable(s.batch_size)]
    if not candidates:
        return None
    best = min(candidates, key=lambda s: (s.mean_cost, -s.converged))
    notes = []
    cheaper = min(ranked, key=lambda s: (s.mean_cost, -s.converged)) if ranked else None
    if cheaper is not None and not runnable(cheaper.batch_size):
        ban = max((x for x in shut_out if x.batch_size <= cheaper.batch_size), key=lambda x: x.batch_size)
        notes.append(
            f"batch size {cheaper.batch_size} has a lower mean, but it is shut out of the decisions: batch size "
            f"{ban.batch_size} ran out of memory in recurrence {ban.since} ({ban.until})"
        )
    default = next((s for s in stats if s.batch_size == default_batch_size and s.mean_cost is not None), None)
    if default is not None and not runnable(default.batch_size):
        default = None  # the default itself is shut out: the cheapest that runs is recommended
    above = None
    if default is not None and default_mean_cost is not None and (best.mean_cost or 0.0) > default_mean_cost:
        above = (
            f"batch size {best.batch_size}'s mean cost is above the default's, so the default is recommended; "
            "no batch size has beaten it yet"
        )
        best = default
    if belief is not None and runnable(belief) and belief != best.batch_size:
        above = None  # the optimizer's belief says more
        notes.append(
            f"the optimizer now favours batch size {belief}: its estimate counts every observed try (failures and "
            "early stops too, slow recurrences at their usual pace) and needs no second run, while this "
            "recommendation is the lowest mean over converged runs"
            + (" with at least two of them" if best.converged >= 2 else "")
        )
    notes += [above] if above else []
    note = "; ".join(notes) if notes else None
    assert best.mean_cost is not None
    return Recommendation(
        batch_size=best.batch_size,
        learning_rate=best.learning_rate,
        power_limit=best.power_limit,
        mean_cost=best.mean_cost,
        runs=best.converged,
        savings=None if default_mean_cost is None else _savings(best.mean_cost, default_mean_cost),
        note=note,
    )


def believed_best(
    records: Sequence[TrialRecord], run_dir: str | Path, settings: Mapping[str, Any] | None = None
) -> Belief:
    """Fold ``records`` as the engine does under the run's settings, and ask the optimizer what it favours.

    Args:
        records: The history.
        run_dir: The run directory.
        settings: Its settings already read (None: read them).

    Returns ``Belief(None)`` when the run directory has no readable settings (an old or copied history).
    """
    from zeus_run.engine.replay import Knobs
    from zeus_run.errors import HistoryError

    try:
        knobs = Knobs.from_run_dir(run_dir, settings)
    except HistoryError as exc:
        logger.debug("no optimizer belief: %s", exc)
        return Belief(None)
    return belief_of(records, knobs)


def saved_belief(run_dir: str | Path, records: Sequence[TrialRecord]) -> Belief | None:
    """What the engine believed after folding ``records``, as it saved it beside the history (``belief.json``,
    `zeus_run.rundir.belief`); None where it saved none that covers them all (a history written before beliefs were
    kept, or by hand, or a record appended since)."""
    from zeus_run.rundir.belief import read_belief

    saved = read_belief(Path(run_dir))
    if saved is None or not records or saved.folded != len(records) or saved.last_trial != records[-1].trial:
        return None
    return Belief(saved.leader, dict(saved.slow))


def belief_of(records: Sequence[TrialRecord], knobs: Knobs) -> Belief:
    """What the optimizer favours after folding ``records`` under ``knobs``, and the slow recurrences it saw: the
    replay of a history that has no saved belief (`saved_belief`), and of a simulation's records."""
    from zeus_run.engine.ledger import Ledger

    recurrences = max((r.recurrence for r in records), default=0) + 1
    engine = knobs.engine(recurrences)
    ledger = Ledger.from_history(engine, records)
    return Belief(ledger.leader(), dict(ledger.slow))


def _savings(value: float, baseline: float) -> float | None:
    return None if baseline <= 0 else 1.0 - value / baseline
