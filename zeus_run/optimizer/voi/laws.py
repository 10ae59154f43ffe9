"""zeus-voi revision 10's walk: half a doubling a step, probes bounded by the laws of epochs and pace, and jumps.

A recurrence's cost is the epochs it needs to reach the target times the cost of one epoch (its
pace). Every run measures both, and each follows a law that holds for any training job:

* **Epochs** (McCandlish et al., 2018, "An Empirical Model of Large-Batch Training"):
  ``E = Emin (1 + B / Bnoise)`` examples, so ``epochs(B) = a + k B`` with ``a, k >= 0``. Epochs do
  not fall as the batch size grows, and grow at most in proportion to it. A run's count is a whole
  number that varies with its seed: two batch sizes' counts tell ``k`` only as far as their
  difference stands out of that noise (pooled over the batch sizes run more than once, `pooled_noise`).
* **Pace**: an iteration costs a fixed part (launches, the optimizer's step, loading) and a part per
  example, so ``pace(B) = alpha + beta / B`` with ``alpha, beta >= 0``. A larger batch runs an epoch
  no slower, and gains less and less. A run measures its pace to a few percent. Some jobs break this
  law (padding to the longest sequence of a batch, memory traffic: pace that rises with the batch
  size); where two measured paces do, the measured change stands in for it.

Revision 10 uses them three ways, on top of revision 9's walk (`zeus_run.optimizer.voi.walk`):

1. **What a probe can save at most** (`floor`). Beyond the largest batch size tried, epochs cannot
   fall, so against a leader at or below it only pace can save, and pace falls at most to ``alpha``
   of the law through the two largest paces measured (not at all where they rose): where pace is
   flat, no probe upwards is worth its cost. Unless the runs contradict the law: where the two
   largest counts fell by more than `REFUTE` standard deviations of their noise as the batch size grew
   (a learning rate tuned for large batches), the law bounds nothing there. Beyond the smallest, pace does not fall (or at most at
   the rate measured, where it fell), and epochs fall at most along the law through the two smallest
   counts, their difference taken `Z` standard deviations of its noise on the optimistic side. A
   probe's saving is valued with its cost floored there, unless the laws fail, a chance of
   `LAW_DOUBT` (then revision 9's value stands). Between two converged batch sizes (a gap of the
   walk, or a batch size a warm start proposes inside the tried range), each factor changes
   monotonically, whichever way a job bends the laws: a probe there costs at least the lesser of
   the two counts, read `Z` standard deviations optimistic, times the lesser of the two paces (`between`).
2. **A jump where the runs identify the laws** (`jump`). Through the end of the tried range and the
   batch size inside it, each law has two parameters and two points. Where the two epoch counts
   differ beyond their noise and both laws pass through the points with every parameter positive,
   they predict the cost beyond the end, curving as the laws curve (a descent flattens, pace
   steepens towards small batch sizes), and the batch size they predict cheapest, two or more steps
   on and at most twice as far as the two points lie apart, is a probe (valued as any). Where the
   runs do not identify them (a difference within the noise, a law broken), there is no jump.
3. **The first probe's direction** (`idle`). With b0 alone converged both laws are blind. A GPU that
   b0 keeps less than half busy (its mean power under half what it may draw) spends most of an
   iteration on the fixed part, and a larger batch fills it: the walk probes upwards first.

And one change that is not a law: the walk steps over batch sizes about half a doubling apart
(`walk_grid`), whatever the spacing of the list; a finer list is walked at that pace, and its batch
sizes between the steps are the walk's gaps.

Functions of the policy's face (`zeus_run.optimizer.voi.state.Policy`) and its state, pure as its fold is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from zeus_run.optimizer._base import Decision
from zeus_run.optimizer._stats import log_moments, lognormal_shortfall
from zeus_run.optimizer.voi.state import Estimate, LogStats, Policy, VOIState
from zeus_run.optimizer.voi.walk import candidates, overhead_share
from zeus_run.optimizer.voi.warm import converge_chance as warm_chance
from zeus_run.optimizer.voi.warm import epoch_logs as warm_epoch_logs
from zeus_run.optimizer.voi.warm import epochs as warm_epochs

#: Chance that the laws do not hold beyond the batch sizes tried (the probe is then valued as revision 9 values it).
LAW_DOUBT = 0.1
#: Relative spread of one run's epochs to the target assumed before batch sizes with two runs measure it,
#: and its weight in degrees of freedom.
EPOCHS_PRIOR_SD = 0.1
EPOCHS_PRIOR_DOF = 2.0
#: Standard deviations of the epoch counts' noise by which a law is read on the optimistic side (`floor`),
#: and by which two counts must differ to identify the epochs' law (`identified`).
Z = 1.0
#: Standard deviations of their noise by which two counts must fall as the batch size grows before the runs
#: are taken to contradict the epochs' law (`floor`): a law is dropped only on strong evidence.
REFUTE = 2.0
#: Spacing of the walk's steps (unit: doublings of the batch size; `walk_grid`).
STEP = 0.5
#: Farthest a jump reaches, in multiples of the distance between the two batch sizes it rests on (`jump`).
REACH = 2.0
#: The mean power under which b0's GPUs are counted idle (a share of what they may draw; `idle`).
IDLE = 0.5

#: Batch size -> ``(sum, count)`` of the epochs to the target of its converged runs (here and, warm, in the source):
#: running totals, so that reading them costs the same at recurrence 10 and 10,000.
Epochs = Mapping[int, tuple[int, int]]


def pooled_noise(stats: Iterable[LogStats]) -> float:
    """Relative variance of one run's epochs to the target, from each batch size's `LogStats` (what the state keeps
    as it folds): pooled over batch sizes with two or more converged runs, plus `EPOCHS_PRIOR_DOF` pseudo degrees of
    freedom at `EPOCHS_PRIOR_SD`."""
    ss, dof = EPOCHS_PRIOR_DOF * EPOCHS_PRIOR_SD**2, float(EPOCHS_PRIOR_DOF)
    for n, s1, s2 in stats:
        if n >= 2:
            ss += max(s2 - s1 * s1 / n, 0.0)
            dof += n - 1
    return ss / dof


def _means(epochs: Epochs, est: Mapping[int, Estimate], *sizes: int) -> tuple[dict[int, float], dict[int, float]]:
    """Mean epochs and pace (mean cost over mean epochs) of each of ``sizes``."""
    e = {b: epochs[b][0] / epochs[b][1] for b in sizes}
    return e, {b: est[b].mean / e[b] for b in sizes}


def floor(
    epochs: Epochs, est: Mapping[int, Estimate], end: int, inner: int, leader: int, b: int, var1: float
) -> float | None:
    """The least cost the untried ``b`` beyond ``end`` (away from ``inner``) can have by the laws (unit: J).

    Upwards (the leader at or below ``end``): epochs do not fall, so the cost is at least the leader's
    times ``alpha`` (the pace law through ``inner`` and ``end``; their pace where it rose) over the
    leader's pace; None where the two counts contradict that (they fell by more than `REFUTE` standard
    deviations of their noise). Downwards (the leader at or above ``end``): pace does not fall (where it fell from
    ``inner`` to ``end``, at most at that log-log rate), and epochs fall at most along ``a + k B``
    through the two counts, each moved `Z` standard deviations of its noise (``var1`` per run) towards
    a steeper law. None for a leader on the other side, or without epochs.

    Args:
        epochs: Batch size -> the sum and count of its converged runs' epochs (here and, warm, in the source).
        est: Posterior of each converged arm's mean cost here.
        end: The end of the tried range beyond which ``b`` lies.
        inner: The converged batch size nearest ``end`` inside the range.
        leader: The cheapest arm.
        b: The untried batch size.
        var1: Relative variance of one run's epochs (`pooled_noise`).
    """
    if not all(epochs.get(x) for x in (end, inner, leader)):
        return None
    e, p = _means(epochs, est, end, inner, leader)
    noise = math.sqrt(var1 * (e[end] ** 2 / epochs[end][1] + e[inner] ** 2 / epochs[inner][1]))
    if inner < end and leader <= end:
        if e[end] < e[inner] - REFUTE * noise:
            return None  # epochs fell as the batch size grew, beyond twice their noise: the runs contradict the law
        beta = max(0.0, (p[inner] - p[end]) / (1.0 / inner - 1.0 / end))
        return est[leader].mean * max(0.0, p[end] - beta / end) / p[leader]
    if inner > end and leader >= end:
        slope = math.log(p[inner] / p[end]) / math.log(inner / end)
        pace = p[end] * (b / end) ** slope if slope > 0 else p[end]
        k = max(0.0, (e[inner] - e[end] + Z * noise) / (inner - end))
        count = max(0.0, e[end] - k * (end - b))
        return est[leader].mean * (pace / p[leader]) * (count / e[leader])
    return None


def identified(
    epochs: Epochs, est: Mapping[int, Estimate], end: int, inner: int, var1: float
) -> tuple[float, float, float, float] | None:
    """The laws through ``inner`` and ``end``, ``(a, k, alpha, beta)``, where the runs identify them (else None).

    Identified: the two mean epoch counts differ by more than `Z` standard deviations of their noise
    (``var1`` per run), and both laws pass through the two points with every parameter positive:
    epochs grow with the batch size, but slower than it; pace falls as it grows, but slower than ``1 / B``.
    """
    if not epochs.get(end) or not epochs.get(inner):
        return None
    e, p = _means(epochs, est, end, inner)
    noise = math.sqrt(var1 * sum(e[x] ** 2 / epochs[x][1] for x in (end, inner)))
    k = (e[end] - e[inner]) / (end - inner)
    beta = (p[inner] - p[end]) / (1.0 / inner - 1.0 / end)
    a, alpha = e[end] - k * end, p[end] - beta / end
    if abs(e[end] - e[inner]) <= Z * noise or min(a, k, alpha, beta) <= 0.0:
        return None
    return a, k, alpha, beta


def jump(
    walker: Policy, state: VOIState, epochs: Epochs, est: Mapping[int, Estimate], cv2: float, var1: float
) -> list[tuple[int, str, tuple[float, float]]]:
    """Beyond each end of the tried range, the batch size the identified laws (`identified`) predict cheapest.

    Only two or more walk steps beyond the end (the next step is the walk's own) and at most `REACH`
    times as far (in log batch size) as the two batch sizes the laws rest on lie apart. Its log cost
    is the end's, plus the laws' change from the end to it; its spread the walk's over as many steps
    (`Policy.STEP_SD` each), the end's estimate's and one trial's (``cv2``).
    """
    bs = walker.batch_sizes
    out = []
    tried = [i for i, b in enumerate(bs) if b in state.arms]
    for side, at, step in (("downwards", min(tried), -1), ("upwards", max(tried), 1)):
        end = bs[at]
        inside = [b for b in est if (b > end if step < 0 else b < end)]
        if end not in est or not inside:
            continue
        inner = min(inside) if step < 0 else max(inside)
        law = identified(epochs, est, end, inner, var1)
        if law is None:
            continue
        a, k, alpha, beta = law
        reach = REACH * abs(math.log(end / inner))
        far = [
            j for j in range(at + 2 * step, -1 if step < 0 else len(bs), step) if abs(math.log(bs[j] / end)) <= reach
        ]
        if not far:
            continue
        j = min(far, key=lambda j: (a + k * bs[j]) * (alpha + beta / bs[j]))
        b = bs[j]
        change = math.log((a + k * b) * (alpha + beta / b) / ((a + k * end) * (alpha + beta / end)))
        log_end, var_end = log_moments(est[end].mean, est[end].var)
        sd = math.sqrt(abs(j - at) * walker.STEP_SD**2 + var_end + cv2)
        out.append((b, f"{side}, a jump the laws of epochs and pace identify", (log_end + change, sd)))
    return out


def idle(opt: Policy, state: VOIState) -> bool:
    """Whether b0 alone was tried and its first run drew less than `IDLE` of the power its GPUs may draw.

    An iteration costs a fixed part and a part per example; a GPU busy a share ``u`` of the time
    spends ``1 - u`` on the fixed part. Doubling the batch size then multiplies the pace by
    ``(1 + u) / 2`` and halving it by ``2 - u``, while epochs change by a factor between 1 and 2, the
    middle of which (sqrt(2)) is all one knows before a second batch size converges. Upwards is the
    cheaper guess where ``(1 + u) / 2 x sqrt(2) < (2 - u) / sqrt(2)``: ``u < 1/2``, the mean power
    over what the GPUs may draw (`zeus_run.optimizer.Observation.power`) standing in for ``u``.
    """
    first = state.first.get(opt.default_batch_size)
    return len(state.arms) == 1 and first is not None and 0.0 < first.power < IDLE


def walk_grid(batch_sizes: Sequence[int], b0: int) -> tuple[int, ...]:
    """The batch sizes the walk steps over: from b0 outwards, each the one nearest `STEP` doublings on.

    A list spaced at least that widely is the list itself; a finer one is walked at that pace.
    """
    grid = [b0]
    for sign in (-1, 1):
        here = b0
        while True:
            beyond = [b for b in batch_sizes if (b < here if sign < 0 else b > here)]
            if not beyond:
                break
            here = min(beyond, key=lambda b: (abs(abs(math.log2(b / here)) - STEP), abs(math.log2(b / here))))
            grid.append(here)
    return tuple(sorted(grid))


def pool(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """Two normal predictions ``(mean, sd)`` of one log cost, pooled by precision."""
    wa, wb = 1.0 / max(a[1], 1e-9) ** 2, 1.0 / max(b[1], 1e-9) ** 2
    return (a[0] * wa + b[0] * wb) / (wa + wb), math.sqrt(1.0 / (wa + wb))


def best_probe(
    opt: Policy,
    state: VOIState,
    est: Mapping[int, Estimate],
    leader: int,
    cv2: float,
    horizon: float | None = None,
) -> Decision | None:
    """Revision 10's probe, if any is worth its cost (see the module docstring).

    The candidates are revision 9's on the walk's grid (`zeus_run.optimizer.voi.walk.candidates`: the next
    step beyond each end, a stride down a sure descent, the gaps), the `jump`, and with a warm start the
    batch sizes the source saw converge (the policy's ``warm_candidates``: `zeus_run.optimizer.voi.warm.candidates`,
    or revision 11's `zeus_run.optimizer.voi.transfer.candidates`; their predictions pooled
    with the walk's, and the cheapest of them). Each is valued as revision 9 values a probe (the saving
    over ``horizon`` recurrences, with the chance it converges, less its cost now and its sweep, within
    the budget), with its cost floored by the laws beyond the tried range (`floor`, `LAW_DOUBT`).
    """
    walker = opt.walker
    tried = [b for b in walker.batch_sizes if b in state.arms]
    if not tried:
        return None
    seen = warm_epochs(state)
    var1 = pooled_noise(warm_epoch_logs(state))
    found = [*candidates(walker, state, est, cv2), *jump(walker, state, seen, est, cv2, var1)]
    warm = {b: (why, prior) for b, why, prior in opt.warm_candidates(state, est, cv2, walker.batch_sizes)}
    if state.warm:  # the source says where to go: no stride or jump past a batch size it knows nothing of
        grid, ends = walker.batch_sizes, (min(tried), max(tried))
        near = {grid[i] for e in ends for i in (grid.index(e) - 1, grid.index(e) + 1) if 0 <= i < len(grid)}
        found = [c for c in found if c[0] in warm or c[0] in near or ends[0] < c[0] < ends[1]]
    if warm:
        found = [(b, warm[b][0], pool(prior, warm[b][1])) if b in warm else (b, why, prior) for b, why, prior in found]
        cheapest = min(warm, key=lambda b: (warm[b][1][0], b))
        if cheapest not in {b for b, _, _ in found}:
            found.append((cheapest, *warm[cheapest]))
    if idle(opt, state):
        found.sort(key=lambda c: c[0] < opt.default_batch_size)  # upwards first: ties go to the first
    top = est[leader].mean
    h = opt.PLANNING_HORIZON if horizon is None else horizon
    best: tuple[float, int, str] | None = None
    for batch_size, why, (mu, sd) in found:
        there = warm_chance(opt, state, batch_size)
        p = opt.converge_chance(state, batch_size) if there is None else there
        expected = math.exp(mu + sd * sd / 2.0)
        gain = lognormal_shortfall(mu, sd, top)
        low = _floor_of(state, seen, est, leader, batch_size, var1)
        if low is not None:  # the probe costs at least ``low``, unless the laws fail
            gain -= (1.0 - LAW_DOUBT) * lognormal_shortfall(mu, sd, min(top, low))
            expected += (1.0 - LAW_DOUBT) * lognormal_shortfall(mu, sd, low)
        value = p * gain * h - (expected - p * top) - overhead_share(opt, state, batch_size) * expected
        if value > 0 and opt.within_budget(state, est, expected, p, batch_size) and (best is None or value > best[0]):
            best = (value, batch_size, why)
    if best is None:
        return None
    value, batch_size, why = best
    return Decision(batch_size, "pruning", f"{why}: expected saving exceeds the probe's cost by {value:.4g} J")


def _floor_of(
    state: VOIState, epochs: Epochs, est: Mapping[int, Estimate], leader: int, b: int, var1: float
) -> float | None:
    """`floor` for ``b`` beyond the range of batch sizes tried, `between` inside it (None where nothing bounds it)."""
    if min(state.arms) <= b <= max(state.arms):
        return between(epochs, est, leader, b, var1)
    end = min(state.arms) if b < min(state.arms) else max(state.arms)
    inside = [c for c in est if (c > end if b < end else c < end)]
    if end not in est or not inside:
        return None
    inner = min(inside) if b < end else max(inside)
    return floor(epochs, est, end, inner, leader, b, var1)


def between(epochs: Epochs, est: Mapping[int, Estimate], leader: int, b: int, var1: float) -> float | None:
    """The least cost the untried ``b`` between two converged batch sizes can have (unit: J).

    Epochs and pace each change monotonically between ``lo`` and ``hi``, the nearest converged batch sizes
    on either side (by the laws; and where a job breaks a law, it breaks it the same way across the
    interval): ``b`` costs at least the lesser of their epochs, read `Z` standard deviations of their noise
    on the optimistic side, times the lesser of their paces. None without a converged batch size on each
    side.
    """
    below = [c for c in est if c < b and epochs.get(c)]
    above = [c for c in est if c > b and epochs.get(c)]
    if not below or not above or not epochs.get(leader):
        return None
    lo, hi = max(below), min(above)
    e, p = _means(epochs, est, lo, hi, leader)
    count = min(e[x] * max(0.0, 1.0 - Z * math.sqrt(var1 / epochs[x][1])) for x in (lo, hi))
    return est[leader].mean * (min(p[lo], p[hi]) / p[leader]) * (count / e[leader])
