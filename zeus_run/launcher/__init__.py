"""The launcher: ``zeus-run run`` (and ``--next``), the door that runs the training scripts itself.

* `zeus_run.launcher.run`: `run_job`, a job's recurrences run through an executor, with a durable run directory.

It sits above the decision core (`zeus_run.engine`), the run directory (`zeus_run.rundir`), the executors and
ask/tell (a launcher settles the asks in flight before it runs): none of those imports it.
"""

from zeus_run.launcher.run import RunResult, run_job

__all__ = ["RunResult", "run_job"]
