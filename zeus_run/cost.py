"""The Zeus cost metric, the early-stop threshold, and learning-rate scaling."""

from __future__ import annotations

import math


def zeus_cost(energy: float, time: float, eta: float, max_power: float) -> float:
    """Energy-time cost of a run: ``eta * energy + (1 - eta) * max_power * time``.

    Args:
        energy: Energy consumed (unit: J).
        time: Wall-clock time (unit: s).
        eta: Weight of energy in [0, 1]; 1 optimizes energy only, 0 time only.
        max_power: Maximum power of the job's devices (unit: W); converts time to joules.

    Returns:
        The cost (unit: J).
    """
    if not 0.0 <= eta <= 1.0:
        raise ValueError(f"eta must be in [0, 1], got {eta}")
    return eta * energy + (1.0 - eta) * max_power * time


def cost_threshold(beta: float | None, min_cost: float) -> float:
    """Cost above which a trial is stopped early: ``beta * min_cost``.

    Args:
        beta: Early-stop knob (> 0), or None to disable early stopping.
        min_cost: Lowest cost of a converged recurrence so far (``inf`` if none).

    Returns:
        The threshold, ``inf`` when early stopping is off or nothing has converged yet.
    """
    if beta is None or not math.isfinite(min_cost):
        return math.inf
    return beta * min_cost


#: Cost told to the optimizer for a trial that cannot run one epoch under the
#: threshold, as a multiple of the threshold (the paper's simulator: 100 x beta x min cost).
SKIP_PENALTY = 100.0


def epochs_under_threshold(threshold: float, per_epoch: float, limit: int) -> tuple[int, bool]:
    """Epochs a replayed path may run: at most ``limit``, and no more than fit under ``threshold``.

    Used by executors that know each epoch's cost in advance (traces, recorded
    runs): the path is cut at the last epoch whose cumulative cost stays under
    the threshold.

    Args:
        threshold: Early-stop threshold (unit: J; inf: none).
        per_epoch: Cost of one epoch (unit: J).
        limit: Epoch limit without the threshold.

    Returns:
        ``(epochs, cut)``: the epoch limit, and whether the threshold set it.
    """
    if math.isfinite(threshold) and per_epoch > 0:
        affordable = int(threshold // per_epoch)
        if affordable < limit:
            return affordable, True
    return limit, False


def scale_learning_rate(base_lr: float, base_batch_size: int, batch_size: int, rule: str) -> float:
    """Learning rate for ``batch_size`` given the rate tuned for ``base_batch_size``.

    Args:
        base_lr: Learning rate at the default batch size.
        base_batch_size: The default batch size.
        batch_size: The batch size to run.
        rule: ``sqrt`` (square-root scaling, for adaptive optimizers such as Adam),
            ``linear`` (for SGD) or ``none``.
    """
    ratio = batch_size / base_batch_size
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    if rule == "linear":
        return base_lr * ratio
    if rule == "none":
        return base_lr
    raise ValueError(f"unknown learning-rate scaling rule {rule!r}; use sqrt, linear or none")
