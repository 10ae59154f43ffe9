"""Why a trial ended: `StopReason`, an enum whose members carry their behaviour."""

from __future__ import annotations

import enum

# -- stop reasons ---------------------------------------------------------------------------


class StopReason(str, enum.Enum):
    """Why a trial ended. Members compare equal to their value, which is what records store.

    Each member is ``(value, description, traits)``; traits:

    * ``unobserved``: the optimizer never learns from it (``TrialRecord.observed`` False);
    * ``finishing``: the script is expected to finish by itself (save its model);
    * ``judged``: the launcher or agent judged the trial (its result stands even if the
      cluster then ended the job);
    * ``early``: an early stop (the cost threshold cut it, or it could not start under it);
    * ``failure``: a failure with a cause worth showing;
    * ``natural``: the script ended so by itself (a replay sees it again at the same point);
    * ``infrastructure``: the cluster ended it; retried, not counted against ``max_tries``.
    """

    description: str
    traits: frozenset[str]

    def __new__(cls, value: str, description: str = "", traits: str = "") -> StopReason:
        obj = str.__new__(cls, value)
        obj._value_ = value
        obj.description = description
        obj.traits = frozenset(traits.split())
        return obj

    TARGET_REACHED = ("target_reached", "reached the target metric", "finishing judged")
    MAX_EPOCHS = ("max_epochs", "ran max_epochs without reaching the target", "finishing judged")
    COST_THRESHOLD = ("cost_threshold", "stopped early: cost would exceed beta x best cost", "judged early")
    NO_PROGRESS = (
        "no_progress",
        "stopped early: its learning curve cannot reach the target in time",
        "judged early",
    )
    EXITED = ("exited", "script exited without reaching the target", "failure natural")
    CRASHED = ("crashed", "script failed (non-zero exit)", "failure natural")
    TIMEOUT = ("timeout", "exceeded the per-trial timeout", "failure natural")
    INTERRUPTED = ("interrupted", "launcher was interrupted; not fed to the optimizer", "unobserved")
    SKIPPED = ("skipped", "could not run one epoch under the cost threshold", "judged early")
    CONFIG_ERROR = (
        "config_error",
        "the spec is wrong (no metric was ever readable, or the script rejected its arguments); "
        "not fed to the optimizer, retried once the spec is fixed",
        "unobserved",
    )
    ENVIRONMENT_ERROR = (
        "environment_error",
        "the script could not start (a missing module, an import or syntax error, a missing script or "
        "interpreter); not fed to the optimizer, retried once the environment is fixed",
        "unobserved",
    )
    INFRASTRUCTURE = (
        "infrastructure",
        "the cluster ended it (Slurm TIMEOUT, NODE_FAIL, PREEMPTED, a scancel); not fed to the optimizer, retried",
        "unobserved failure infrastructure",
    )

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @property
    def observed(self) -> bool:
        """Whether the optimizer learns from a trial that ended so."""
        return "unobserved" not in self.traits

    @property
    def finishing(self) -> bool:
        """Whether the script is expected to finish by itself (``stop.grace``, not ``term_grace``)."""
        return "finishing" in self.traits

    @property
    def judged(self) -> bool:
        """Whether the trial was judged (its result stands even if the cluster then ended the job)."""
        return "judged" in self.traits

    @property
    def early_stop(self) -> bool:
        """Whether it counts as an early stop (``max_early_stops``)."""
        return "early" in self.traits

    @property
    def failure(self) -> bool:
        """Whether it is a failure with a cause worth showing."""
        return "failure" in self.traits

    @property
    def natural_end(self) -> bool:
        """Whether the script reached that end by itself: it happens again at the same point, whatever the knobs."""
        return "natural" in self.traits

    @property
    def infrastructure(self) -> bool:
        """Whether the cluster ended it (retried, not counted against ``max_tries``)."""
        return "infrastructure" in self.traits

    @classmethod
    def parse(cls, value: str) -> StopReason:
        """The member named by ``value``.

        Raises:
            ValueError: It names none.
        """
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"unknown stop_reason {value!r}") from None


#: Why a trial ended, ``value -> description`` (README, "Stop reasons").
STOP_REASONS = {r.value: r.description for r in StopReason}
