"""The legacy room: ``zeus-voi`` revisions 1-9, frozen, for the run directories recorded under them.

A run directory keeps the revision it was recorded under (`zeus_run.rundir.resume.keep_recorded_revision`), and
``zeus-run replay`` re-folds its history under that revision: the revisions that records name must decide as they
did. They live here, apart from the live policy (`zeus_run.optimizer.voi`), as Zeus keeps its paper's code in
``zeus/_legacy/``: the live policy has one revision and no branch on it, and nothing here changes unless a
recorded run would otherwise replay differently. `zeus_run.optimizer.make_optimizer` builds
`LegacyVOIOptimizer` for ``optimizer.revision`` 1-9.

Its rooms: ``voi`` (the policy, revisions 1-9 as branches), ``second_look`` (4, 6), ``pace`` (5), ``stride`` (7),
``trend`` (8), ``overhead`` (9).
"""

from __future__ import annotations

from zeus_run.optimizer.legacy.voi import REVISIONS, LegacyVOIOptimizer

__all__ = ["REVISIONS", "LegacyVOIOptimizer"]
