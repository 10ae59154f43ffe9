"""The decision path: what to run next, and what a finished trial teaches.

* `zeus_run.engine.core`: the recurrence loop shared by real runs, simulation and replay.
* `zeus_run.engine.ledger`: what is known at a point of the history (records folded, trials in flight).
* `zeus_run.engine.request`: one trial's decision and its context.
* `zeus_run.engine.concurrent`: the executor contract and its slot pool.
* `zeus_run.engine.knobs`: the settings that decide a run, built once.
* `zeus_run.engine.position`: where a run stands, from its records.
* `zeus_run.engine.replay`: the audit and the what-if replays.
* `zeus_run.engine.runner`: real runs (``zeus-run run``).
"""
