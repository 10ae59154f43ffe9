"""zeus-voi's warm start: what the same job learnt elsewhere seeds the walk here.

A recurring job often has a history already: on another GPU, on another cluster, or in the run
directory it ran in before a change of its spec forced a new one. Epochs to the target are a
property of the training (model, data, batch size, learning rate), not of the machine: they carry
over. Pace (cost per epoch) and power are the machine's: they do not, and are measured here.

The source's observations are folded first (`Observation.warm`), into the state's ``warm`` fields
only: each batch size's runs there (how many reached the target), their epochs, and their costs
without the power-limit sweep. They change neither the bandit's arms nor the budget: b0 still runs
first, and every arm is learnt from its runs here. Two things follow from them:

* **Candidates.** Every batch size the source saw reach the target, and every step of the walk
  between them, is a probe the walk may make, however far from the batch sizes tried here
  (`candidates`). Its cost here is the source's cost there (`source_curve`: interpolated in log batch
  size between the batch sizes it ran) times the ratio of cost here to cost there, measured at the
  batch sizes run in both and interpolated likewise (the epochs carry over exactly; the pace carries
  over as a ratio that wanders from machine to machine: a random walk of `WARM_SD` per doubling). It
  is valued as any probe (`zeus_run.optimizer.legacy.rev10.laws.best_probe`); where the walk would probe the batch
  size anyway, the two predictions are pooled.
* **Convergence.** The chance that a batch size reaches the target is its own record there, under
  the Jeffreys prior (`converge_chance`): a batch size that never converged there is a poor probe.
  And its epochs join the epochs seen here in the laws' fits (`epochs`).

The source itself is a `zeus_run.optimizer.legacy.rev10.state.WarmStart`. Functions of the policy's face
(`zeus_run.optimizer.legacy.rev10.state.Policy`) and its state, pure as its fold is.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence

from zeus_run.optimizer._base import Observation
from zeus_run.optimizer._stats import TINY, log_moments
from zeus_run.optimizer._stats import median as _median
from zeus_run.optimizer.legacy.rev10.state import Estimate, LogStats, Policy, VOIState, WarmRuns, log_stats

#: How far the ratio of cost here to cost there wanders per doubling of the batch size (the sd of a random
#: walk in log cost: the pace of a batch size relative to another differs from machine to machine).
WARM_SD = 0.15


def observe_warm(state: VOIState, obs: Observation) -> VOIState:
    """The state after one of the source's observations (only its ``warm`` field changes)."""
    runs = state.warm.get(obs.batch_size, WarmRuns())
    steady = max(obs.cost - obs.overhead, TINY)
    if obs.reached:
        runs = WarmRuns(
            runs.tried + 1,
            runs.reached + 1,
            (*runs.costs, steady),
            (*runs.epochs, obs.epochs) if obs.epochs > 0 else runs.epochs,
        )
    else:
        runs = dataclasses.replace(runs, tried=runs.tried + 1)
    return dataclasses.replace(state, warm={**state.warm, obs.batch_size: runs})


def epochs(state: VOIState) -> dict[int, tuple[int, int]]:
    """The sum and count of the epochs to the target of each batch size's converged runs, here (the state's running
    totals) and in the source (they carry over)."""
    out = dict(state.epoch_totals)
    for b, runs in state.warm.items():
        if runs.epochs:
            total, n = out.get(b, (0, 0))
            out[b] = (total + sum(runs.epochs), n + len(runs.epochs))
    return out


def epoch_logs(state: VOIState) -> list[LogStats]:
    """The `zeus_run.optimizer.legacy.rev10.state.LogStats` of each batch size's epochs in `epochs`: the state's totals, and the
    source's runs added (a few: summed here)."""
    out = dict(state.epoch_logs)
    for b, runs in state.warm.items():
        if runs.epochs:
            n, s1, s2 = out.get(b, (0, 0.0, 0.0))
            m, t1, t2 = log_stats(runs.epochs)
            out[b] = (n + m, s1 + t1, s2 + t2)
    return list(out.values())


def converge_chance(opt: Policy, state: VOIState, batch_size: int) -> float | None:
    """Chance that ``batch_size`` reaches the target by its runs in the source (None: it has none there).

    ``(reached + a) / (tried + a + b)`` under `CONVERGE_PRIOR` ``(a, b)`` (Jeffreys).
    """
    runs = state.warm.get(batch_size)
    if runs is None or runs.tried == 0:
        return None
    a, b = opt.CONVERGE_PRIOR
    return (runs.reached + a) / (runs.tried + a + b)


def source_curve(state: VOIState, cv2: float, batch_size: int) -> tuple[float, float] | None:
    """Mean and variance of the source's log cost at ``batch_size``: its median steady cost where it ran it to the
    target, else interpolated in log batch size between the two nearest that it did (a Brownian bridge of
    `WARM_SD` per doubling); None outside their range. Each median counts ``cv2`` per run of noise."""
    runs = {b: r.costs for b, r in state.warm.items() if r.costs}
    if batch_size in runs:
        return math.log(_median(runs[batch_size])), cv2 / len(runs[batch_size])
    below = [b for b in runs if b < batch_size]
    above = [b for b in runs if b > batch_size]
    if not below or not above:
        return None
    lo, hi = max(below), min(above)
    d1, d2 = math.log2(batch_size / lo), math.log2(hi / batch_size)
    w = d1 / (d1 + d2)
    mean = (1.0 - w) * math.log(_median(runs[lo])) + w * math.log(_median(runs[hi]))
    var = (1.0 - w) ** 2 * cv2 / len(runs[lo]) + w**2 * cv2 / len(runs[hi]) + WARM_SD**2 * d1 * d2 / (d1 + d2)
    return mean, var


def candidates(
    opt: Policy,
    state: VOIState,
    est: Mapping[int, Estimate],
    cv2: float,
    grid: Sequence[int] = (),
) -> Iterator[tuple[int, str, tuple[float, float]]]:
    """Each untried batch size the source ran to the target, or on the walk's ``grid`` between two it did, with the
    mean and sd of its log cost here.

    The source's log cost there (`source_curve`), plus the log of the ratio of a cost here to a cost there at
    the batch sizes that converged in both (the anchors): interpolated in log batch size between the two
    anchors around it (a Brownian bridge of spread `WARM_SD` per doubling), continued from the nearest anchor
    beyond them. The spread also counts each anchor's estimate and one trial here (``cv2``).
    """
    anchors = {}
    for a in est:
        there = source_curve(state, cv2, a) if state.warm.get(a) and state.warm[a].costs else None
        if there is not None:
            la, va = log_moments(est[a].mean, est[a].var)
            anchors[a] = (la - there[0], va + there[1])
    if not anchors:
        return
    for b in opt.batch_sizes:
        runs = state.warm.get(b)
        there = None if b in state.arms else source_curve(state, cv2, b)
        if there is not None and not (runs and runs.costs) and b not in grid:
            continue  # between the source's batch sizes only on the walk's steps (a finer list is walked at that pace)
        if there is None:
            continue
        below = [a for a in anchors if a < b]
        above = [a for a in anchors if a > b]
        if below and above:
            lo, hi = max(below), min(above)
            d1, d2 = math.log2(b / lo), math.log2(hi / b)
            w = d1 / (d1 + d2)
            shift = (1.0 - w) * anchors[lo][0] + w * anchors[hi][0]
            var = (1.0 - w) ** 2 * anchors[lo][1] + w**2 * anchors[hi][1] + WARM_SD**2 * d1 * d2 / (d1 + d2)
        else:
            a = max(below) if below else min(above)
            shift, var = anchors[a][0], anchors[a][1] + WARM_SD**2 * abs(math.log2(b / a))
        why = (
            f"warm: it reached the target in the source, {runs.reached} of {runs.tried} runs"
            if runs is not None and runs.costs
            else "warm: between batch sizes that reached the target in the source"
        )
        yield b, why, (there[0] + shift, math.sqrt(var + there[1] + cv2))
