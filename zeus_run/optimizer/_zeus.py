"""The published Zeus batch-size optimizer: pruning exploration, then Gaussian TS."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from zeus_run.optimizer._base import BatchSizeOptimizer, Decision, Observation
from zeus_run.optimizer._gts import ArmStats, posterior, sample_means
from zeus_run.optimizer._pruning import PruningState
from zeus_run.spec import POLICY_DEFAULTS, OptimizerSettings


@dataclass(frozen=True)
class ZeusState:
    """Everything the Zeus optimizer has learned.

    Attributes:
        step: Number of observations folded in.
        pruning: Pruning exploration progress.
        arms: Reward statistics of every batch size ever observed.
    """

    step: int
    pruning: PruningState
    arms: Mapping[int, ArmStats] = field(default_factory=dict)

    @property
    def survivors(self) -> tuple[int, ...]:
        """Bandit arms (valid once pruning is over)."""
        return self.pruning.candidates


class ZeusOptimizer(BatchSizeOptimizer[ZeusState]):
    """Pruning exploration + Gaussian Thompson Sampling with learned per-arm precision.

    Faithful to the seeds' ``PruningGTSBatchSizeOptimizer``: every observation
    (converged or not) adds ``-cost`` to its arm's rewards; after pruning, the
    bandit's arms are the survivors, each arm's reward precision is
    ``1 / var`` of its (windowed) rewards, and an arm with fewer than
    ``num_explorations`` rewards is explored (in random order) before sampling.
    """

    name = "zeus"

    def __init__(
        self,
        batch_sizes: Iterable[int],
        default_batch_size: int,
        seed: int = 123456,
        pruning_rounds: int | None = None,
        window_size: int = 0,
        prior_mean: float = 0.0,
        prior_precision: float = 0.0,
        num_explorations: int | None = None,
    ) -> None:
        """Args:
        batch_sizes: Feasible batch sizes.
        default_batch_size: b0, where pruning starts.
        seed: Seed of the Thompson draws.
        pruning_rounds: Rounds of pruning exploration (>= 0; None: the policy's default,
            `zeus_run.spec.POLICY_DEFAULTS`).
        window_size: Most recent rewards per arm the bandit uses (0: all).
        prior_mean: Prior mean of an arm's mean reward (reward = -cost, unit: J).
        prior_precision: Prior precision (0: uninformative).
        num_explorations: Rewards an arm needs before it is sampled (None: the policy's default).

        The published algorithm ignores how many recurrences are left (a horizon given through `with_horizon`
        changes nothing) and keeps the paper's early stop (``optimizer.revision`` is ``zeus-voi``'s alone).
        """
        super().__init__(batch_sizes, default_batch_size, seed)
        defaults = POLICY_DEFAULTS[self.name]
        pruning_rounds = defaults["pruning_rounds"] if pruning_rounds is None else pruning_rounds
        num_explorations = defaults["num_explorations"] if num_explorations is None else num_explorations
        if pruning_rounds < 0 or window_size < 0 or num_explorations < 0 or prior_precision < 0:
            raise ValueError("pruning_rounds, window_size, num_explorations and prior_precision must be >= 0")
        self.pruning_rounds = pruning_rounds
        self.window_size = window_size
        self.prior_mean = prior_mean
        self.prior_precision = prior_precision
        self.num_explorations = num_explorations

    @classmethod
    def from_settings(
        cls, settings: OptimizerSettings, batch_sizes: tuple[int, ...], default_batch_size: int, seed: int
    ) -> ZeusOptimizer:
        """The policy a spec's ``optimizer`` section asks for: Zeus's knobs (pruning rounds, window, prior,
        explorations); ``revision`` is ``zeus-voi``'s."""
        return cls(
            batch_sizes,
            default_batch_size,
            seed=seed,
            pruning_rounds=settings.pruning_rounds,
            window_size=settings.window_size,
            prior_mean=settings.prior_mean,
            prior_precision=settings.prior_precision,
            num_explorations=settings.num_explorations,
        )

    def initial_state(self) -> ZeusState:
        return ZeusState(
            step=0, pruning=PruningState.begin(self.batch_sizes, self.default_batch_size, self.pruning_rounds)
        )

    def observe(self, state: ZeusState, obs: Observation) -> ZeusState:
        if obs.batch_size not in self.batch_sizes:
            raise ValueError(f"observed batch size {obs.batch_size} is not one of {list(self.batch_sizes)}")
        arms = dict(state.arms)
        arms[obs.batch_size] = arms.get(obs.batch_size, ArmStats()).add(-obs.cost, self.window_size)
        return dataclasses.replace(
            state,
            step=state.step + 1,
            # A result pruning did not dispatch (concurrent recurrences) feeds the bandit only.
            pruning=state.pruning.observe(obs.batch_size, obs.cost, obs.reached) if obs.probe else state.pruning,
            arms=arms,
        )

    def decide(self, state: ZeusState, draw: int = 0) -> Decision:
        expecting = state.pruning.expecting
        if expecting is not None:
            return Decision(expecting, "pruning", state.pruning.describe())
        return self.sample(state, state.survivors, draw)

    def leader(self, state: ZeusState) -> int | None:
        """The arm with the highest posterior mean reward (lowest cost): the survivors once pruning is over.

        Only for display (`zeus_run.views.recommend.believed_best`): the paper's early stop does not use it.
        """
        arms = state.survivors if state.pruning.expecting is None else tuple(state.arms)
        arms = tuple(a for a in arms if a in state.arms)
        if not arms:
            return None
        means = self.arm_posteriors(state, arms)
        return arms[max(range(len(arms)), key=lambda i: means[i][0])]

    def sample(self, state: ZeusState, arms: tuple[int, ...], draw: int = 0) -> Decision:
        """Gaussian TS over ``arms``: explore under-observed arms (random order), else draw and take the best.

        ``draw`` selects the random stream (`BatchSizeOptimizer.rng`).
        """
        rng = self.rng(state.step, draw)
        order = list(range(len(arms)))
        rng.shuffle(order)
        for idx in order:
            arm = arms[idx]
            n = self._count(state, arm)
            if n < self.num_explorations or n == 0:
                return Decision(arm, "explore", f"arm has {n} observation(s)")
        draws = sample_means(rng, self.arm_posteriors(state, arms))
        best = max(range(len(arms)), key=draws.__getitem__)
        return Decision(arms[best], "thompson", f"sampled mean reward {draws[best]:.4g}")

    def arm_posteriors(self, state: ZeusState, arms: tuple[int, ...]) -> list[tuple[float, float]]:
        """Posterior ``(mean, precision)`` of each of ``arms``' mean reward (each observed at least once)."""
        return [posterior(state.arms[a], self.prior_mean, self.prior_precision) for a in arms]

    def posteriors(self, state: ZeusState) -> dict[int, tuple[float, float]]:
        """Posterior ``(mean, precision)`` of each observed arm's mean reward (for display)."""
        arms = tuple(sorted(state.arms))
        return dict(zip(arms, self.arm_posteriors(state, arms), strict=False))

    def _count(self, state: ZeusState, arm: int) -> int:
        stats = state.arms.get(arm)
        return 0 if stats is None else stats.count
