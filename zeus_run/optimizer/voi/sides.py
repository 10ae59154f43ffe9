"""zeus-voi's two sides (revision 12): below b0 and above it, each explored on this job's evidence on that side.

Revision 10 drew every probe's chance to converge from every batch size tried (a Jeffreys prior over all of them)
and every probe from one budget. A probe below b0 that never reached the target (a learning rate tuned for b0 is
too high for half its batch, or the run was early-stopped at twice the best cost) then halved the chance it gave a
probe above b0 and spent most of the job's budget: the walk upwards ended on evidence from the other side, and a
job whose cost falls fourfold above b0 (generated gen02: a learning rate kept from b0, so its epochs fall as the
batch size grows) ran b0 for the rest of its life.

Revision 12 keeps the two sides apart:

* **The chance to converge** (`converge_chance`): Jeffreys' prior over the batch sizes tried on the probe's side
  and b0 (b0 is both sides' evidence): ``(converged + 1/2) / (tried + 1)``. A failure closes its own side (the
  walk does not step past it) and says nothing of the other.
* **The budget** (`excess`, `within_budget`): each side may spend `SIDE_BUDGET` of the Default's cost over the job
  beyond the Default. A side is charged what its own runs and b0's cost beyond the Default; the other side's
  savings fund it (a cheaper leader found there lowers the excess), its losses do not. A probe below b0 that
  failed cannot then spend the walk upwards' share.

The price of exploring (docs/optimizer.md): at each decision the expected excess charged to each side stays
within ``SIDE_BUDGET x D x N`` (``D`` the Default's cost, ``N`` the recurrences, or the ``lifetime`` when
open-ended), so the expected price of exploring on a job whose default is the best stays within
``2 x SIDE_BUDGET x D x N`` plus, per side, what its last probe cost beyond its expected cost. Pure functions of
the policy's face (`zeus_run.optimizer.voi.state.Policy`) and its state.
"""

from __future__ import annotations

from collections.abc import Mapping

from zeus_run.optimizer.voi.state import Estimate, Policy, VOIState

#: What each side's exploration may cost beyond the Default over the job, as a share of the Default's cost over the
#: job: the two together are revision 10's 10% ("1.1x the Default", which a team would notice).
SIDE_BUDGET = 0.05


def side(b0: int, batch_size: int) -> int:
    """-1 below b0, 1 above it, 0 at it."""
    return (batch_size > b0) - (batch_size < b0)


def converge_chance(opt: Policy, state: VOIState, batch_size: int) -> float:
    """Chance that the untried ``batch_size`` reaches the target: Jeffreys' prior (`Policy.CONVERGE_PRIOR`) over
    the first runs of the batch sizes tried on its side of b0, and b0's."""
    b0 = opt.default_batch_size
    s = side(b0, batch_size)
    firsts = [f for b, f in state.first.items() if side(b0, b) in (0, s)]
    a, b = opt.CONVERGE_PRIOR
    return (sum(1 for f in firsts if f.reached) + a) / (len(firsts) + a + b)


def excess(state: VOIState, b0: int, default: float, s: int) -> float:
    """What side ``s``'s exploration has cost beyond the Default (unit: J): its runs' and b0's cost beyond
    ``default`` per converged run, less the other side's savings (never plus its losses); ``s`` 0: both sides."""

    def of(t: int) -> float:
        return sum(spent - default * state.reached.get(b, 0) for b, spent in state.spent_by.items() if side(b0, b) == t)

    if s == 0:
        return of(-1) + of(0) + of(1)
    return of(0) + of(s) + min(0.0, of(-s))


def within_budget(
    opt: Policy,
    state: VOIState,
    est: Mapping[int, Estimate],
    probe: float,
    converge: float,
    batch_size: int,
    n: float,
) -> bool:
    """Whether a run of ``batch_size`` (expected cost ``probe`` if it converges, with chance ``converge``) keeps its
    side's excess (`excess`) within `SIDE_BUDGET` x the Default's cost over ``n`` recurrences (both sides' budgets for
    b0 itself). The run adds ``probe`` less the Default's cost times the chance it converges (one that does not is lost
    whole and its recurrence runs again)."""
    b0 = opt.default_batch_size
    if b0 not in est:
        return True
    default = est[b0].mean
    s = side(b0, batch_size)
    share = SIDE_BUDGET * (2.0 if s == 0 else 1.0)
    return excess(state, b0, default, s) + probe - converge * default <= share * default * n
