"""The decision path: what to run next, and what a finished trial teaches.

* `zeus_run.engine.core`: the recurrence loop shared by real runs, simulation and replay.
* `zeus_run.engine.ledger`: what is known at a point of the history (records folded, trials in flight).
* `zeus_run.engine.request`: one trial's decision and its context.
* `zeus_run.engine.concurrent`: the executor contract and its slot pool.
* `zeus_run.engine.knobs`: the settings that decide a run, built once.
* `zeus_run.engine.position`: where a run stands, from its records.
* `zeus_run.engine.memory`: the batch sizes out-of-memory crashes shut out, and until when (decisions and views).
* `zeus_run.engine.replay`: the audit and the what-if replays.
* `zeus_run.engine.record`: the one builder of a trial's record.
* `zeus_run.engine.classify`: what a finished trial was, on its evidence (the judge of `Engine.tell`).

Opening a job and saving its trials, for every door, is `zeus_run.door`, above this package; the launcher that
drives real runs is `zeus_run.launcher`, above both: nothing here imports either.
"""
