"""The batch-size optimizer interface: configuration in, decisions from folded observations.

An optimizer object holds configuration only (batch sizes, knobs, seed). What
it has learned lives in an immutable *state* built by folding observations:

    state = opt.initial_state()
    for obs in observations:
        state = opt.observe(state, obs)
    decision = opt.decide(state)

`decide` is a pure function of the state, and the state is a pure function of
the ordered observations, so resuming a run, replaying a log and simulating a
trace are all the same fold. Randomness (Thompson sampling) is drawn from a
generator seeded by ``(seed, number of observations, draw)``; ``draw`` tells
apart decisions taken at the same number of observations (recurrences that
start while others are in flight) and is 0 in serial runs.
"""

from __future__ import annotations

import copy
import random
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from zeus_run.optimizer.early_stop import EarlyStopRule
from zeus_run.spec import DEFAULT_LIFETIME


@dataclass(frozen=True)
class Observation:
    """What one trial taught the optimizer.

    Attributes:
        batch_size: The batch size that ran.
        cost: Its cost (unit: J; see `zeus_run.cost.zeus_cost`).
        reached: Whether it reached the target metric.
        probe: Whether pruning exploration may take it as the result it waits for. A trial
            that ran while pruning's own trial was in flight (concurrent recurrences) is not a
            probe: only the bandit's statistics learn from it. Serial runs: always True.
        epochs: Epochs it ran (0: unknown). ``cost / epochs`` is its pace, which a slow
            machine inflates and the batch size's convergence does not (``zeus-voi`` revision 3).
        slowdown: How many times slower than its batch size's median pace the engine found this
            run, whose ``cost`` it then took at that median (the robust early stop's check,
            `zeus_run.optimizer.early_stop.Pace`); 1.0: not slow, or not checked (``zeus-voi``
            revision 6 measures from it how often and how much runs slow down).
        overhead: What its power-limit sweep cost beyond the same work at the chosen limit (unit: J,
            within ``cost``; 0: none). ``zeus-voi`` revision 9 learns ``cost - overhead``.
        power: Its measured mean power as a share of the power its GPUs may draw (their limit in force,
            else their maximum); 0: not measured. ``zeus-voi`` revision 10 reads b0's first run's: a GPU
            that draws less than half of it is not busy, and a larger batch keeps it busier.
        warm: Whether it comes from the warm start's source (another GPU, cluster or run directory of the
            same job), not from this run directory: only its epochs to the target carry over.
        estimated: The share of its energy that is an estimate, not a measurement (0: all measured; 1: all
            estimated, e.g. the CPU estimate; between: a script that measured itself and estimated its start-up).
            The policies learn from the cost as it is; a policy may weigh it. Records written before it was said
            read as 0 unless they are estimates whole, so replays decide as they did.
    """

    batch_size: int
    cost: float
    reached: bool
    probe: bool = True
    epochs: int = 0
    slowdown: float = 1.0
    overhead: float = 0.0
    power: float = 0.0
    warm: bool = False
    estimated: float = 0.0


@dataclass(frozen=True)
class Decision:
    """The optimizer's choice for the next trial.

    Attributes:
        batch_size: Batch size to run.
        stage: ``pruning``, ``explore`` (bandit arm with too few observations)
            or ``thompson`` (sampled).
        detail: Short human-readable reason (e.g. ``round 1, downwards``).
    """

    batch_size: int
    stage: str
    detail: str = ""


S = TypeVar("S")


class BatchSizeOptimizer(ABC, Generic[S]):
    """Chooses batch sizes for a recurring job from the observations so far."""

    #: Registry name (``optimizer.policy`` in the spec).
    name: str = ""
    #: Recurrences of the job (the spec's ``recurrences``; None: open-ended). Policies that
    #: plan over the recurrences left set it; the others ignore it.
    horizon: int | None = None
    #: Recurrences an open-ended job (``horizon`` None) is expected to live: what such a policy plans
    #: over instead (the spec's ``lifetime``; `zeus_run.spec.DEFAULT_LIFETIME`).
    lifetime: int = DEFAULT_LIFETIME
    #: How the engine cuts this policy's trials (`zeus_run.optimizer.early_stop`); instances may choose another.
    early_stop: EarlyStopRule = EarlyStopRule("paper")

    def __init__(self, batch_sizes: Iterable[int], default_batch_size: int, seed: int) -> None:
        """Args:
        batch_sizes: Feasible batch sizes (any order; duplicates rejected).
        default_batch_size: b0, where exploration starts; must be in batch_sizes.
        seed: Seed of every random draw the optimizer makes.
        """
        bs = tuple(sorted(batch_sizes))
        if not bs:
            raise ValueError("batch_sizes is empty: the optimizer needs at least one batch size")
        if len(set(bs)) != len(bs):
            raise ValueError(f"batch_sizes has duplicates: {list(bs)}")
        if default_batch_size not in bs:
            raise ValueError(f"default batch size {default_batch_size} is not in {list(bs)}")
        self.batch_sizes = bs
        self.default_batch_size = default_batch_size
        self.seed = seed

    @abstractmethod
    def initial_state(self) -> S:
        """State before any observation."""

    @abstractmethod
    def observe(self, state: S, obs: Observation) -> S:
        """Return the state after ``obs``; ``state`` itself is not modified."""

    @abstractmethod
    def decide(self, state: S, draw: int = 0) -> Decision:
        """The next batch size to run, given everything observed so far.

        Args:
            state: Everything observed so far.
            draw: Index of the random draw (`rng`): decisions taken at the same number of
                observations while others are in flight get distinct draws; 0 in serial runs.
        """

    def with_horizon(self, horizon: int | None, lifetime: int | None = None) -> BatchSizeOptimizer[S]:
        """A copy that plans over ``horizon`` recurrences, or open-ended over ``lifetime`` (same knobs and seed).

        Args:
            horizon: The job's recurrences (None: open-ended).
            lifetime: An open-ended job's expected recurrences (None: this optimizer's).
        """
        other = copy.copy(self)
        other.horizon = horizon
        if lifetime is not None:
            if lifetime < 1:
                raise ValueError(f"lifetime must be >= 1, got {lifetime}")
            other.lifetime = lifetime
        return other

    def leader(self, state: S) -> int | None:
        """The batch size the optimizer believes best (None: no belief it acts on; the robust early stop uses it)."""
        return None

    def fold(self, observations: Iterable[Observation]) -> S:
        """State after observing ``observations`` in order."""
        state = self.initial_state()
        for obs in observations:
            state = self.observe(state, obs)
        return state

    def rng(self, step: int, draw: int = 0) -> random.Random:
        """The generator for the decision taken after ``step`` observations.

        Seeded by ``(seed, step, draw)`` alone, so a decision never depends on
        how many draws earlier decisions made (resume and replay re-fold
        exactly). ``draw`` 0 is the serial runs' generator; every other draw
        is an independent stream (a string seed is hashed with SHA-512, the
        same in every process).
        """
        if draw == 0:
            return random.Random((self.seed << 32) | (step & 0xFFFFFFFF))
        return random.Random(f"zeus-run/{self.seed}/{step}/{draw}")
