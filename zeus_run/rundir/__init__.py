"""The run directory: one per job, its files, its lock, resuming it and joining it.

* `zeus_run.rundir.store`: the directory and its files.
* `zeus_run.rundir.lock`: locking it and naming the holder.
* `zeus_run.rundir.history`: the append-only history of trials.
* `zeus_run.rundir.resume`: choosing a run directory and picking a run up after a crash.
* `zeus_run.rundir.joins`: a trigger joining the launcher that holds the directory.
"""
