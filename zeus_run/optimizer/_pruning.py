"""Pruning exploration as an immutable state machine.

Each round explores from the round's start batch size downwards (start
included), then upwards. A batch size that fails to reach the target ends that
direction. Batch sizes that reached the target survive into the next round,
which starts from the cheapest of them. After the last round the survivors go
to the bandit.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import TypeVar

logger = logging.getLogger(__name__)

_P = TypeVar("_P", bound="PruningState")


@dataclass(frozen=True)
class PruningState:
    """Where pruning exploration stands.

    Attributes:
        rounds: Total rounds to run.
        round: Current round (0-based); equals ``rounds`` when pruning is over.
        candidates: Sorted batch sizes considered in this round.
        start: Batch size the round starts from.
        down: This round's downward order (start first).
        up: This round's upward order.
        direction: 0 while going down, 1 while going up.
        pos: Index into the current direction's order.
        good: Batch sizes that reached the target in this round.
        best_cost: Cheapest converged cost in this round.
        best: Batch size of ``best_cost`` (the next round's start).
    """

    rounds: int
    round: int
    candidates: tuple[int, ...]
    start: int
    down: tuple[int, ...] = ()
    up: tuple[int, ...] = ()
    direction: int = 0
    pos: int = 0
    good: tuple[int, ...] = ()
    best_cost: float = math.inf
    best: int | None = None

    @classmethod
    def begin(cls, batch_sizes: tuple[int, ...], default: int, rounds: int) -> PruningState:
        """State before the first observation."""
        state = cls(rounds=rounds, round=0, candidates=tuple(sorted(batch_sizes)), start=default)
        return state._start_round() if rounds > 0 else dataclasses.replace(state, round=0, rounds=0)

    @property
    def done(self) -> bool:
        """Whether exploration is over (``candidates`` are then the survivors)."""
        return self.round >= self.rounds

    @property
    def expecting(self) -> int | None:
        """The batch size to explore next, or None when done."""
        if self.done:
            return None
        return (self.down, self.up)[self.direction][self.pos]

    def describe(self) -> str:
        """Human-readable position, e.g. ``round 1/2, downwards``."""
        if self.done:
            return "pruning over"
        return f"round {self.round + 1}/{self.rounds}, {'downwards' if self.direction == 0 else 'upwards'}"

    def observe(self, batch_size: int, cost: float, reached: bool) -> PruningState:
        """Advance after the expected batch size ran.

        An observation of any other batch size does not move exploration (it
        still counts for the bandit's statistics); this keeps the fold total.
        """
        if self.done or batch_size != self.expecting:
            return self
        s = self
        if reached:
            s = dataclasses.replace(s, good=(*s.good, batch_size))
            if cost < s.best_cost:
                s = dataclasses.replace(s, best_cost=cost, best=batch_size)
            s = dataclasses.replace(s, pos=s.pos + 1)
        else:
            s = dataclasses.replace(s, direction=s.direction + 1, pos=0)
        return s._skip_exhausted()

    def _start_round(self: _P) -> _P:
        idx = self.candidates.index(self.start)
        down = tuple(reversed(self.candidates[: idx + 1]))
        up = self.candidates[idx + 1 :]
        s = dataclasses.replace(self, down=down, up=up, direction=0, pos=0, good=(), best_cost=math.inf, best=None)
        return s._skip_exhausted()

    def _skip_exhausted(self: _P) -> _P:
        s = self
        while s.direction < 2 and s.pos >= len((s.down, s.up)[s.direction]):
            s = dataclasses.replace(s, direction=s.direction + 1, pos=0)
        if s.direction < 2:
            return s
        # Round over.
        if s.good:
            # Every batch size in ``good`` converged at a finite cost, so ``best`` is set.
            survivors, start = tuple(sorted(s.good)), s.best if s.best is not None else s.start
        else:
            # Nothing converged this round (only possible after round 1, when the
            # cheapest batch size failed this time). Keep the previous set rather
            # than pruning everything away.
            logger.warning(
                "no batch size reached the target in pruning round %d; keeping %s", s.round + 1, list(s.candidates)
            )
            survivors, start = s.candidates, s.start
        s = dataclasses.replace(s, round=s.round + 1, candidates=survivors, start=start)
        return s if s.done else s._start_round()
