"""One trial of a training script: launched, metered, read and stopped.

* `zeus_run.trial.run`: launch a plan, watch its output, stop it gracefully, return an outcome.
* `zeus_run.trial.launch`: the trial's environment and the checks before the first trial.
* `zeus_run.trial.meter`: time, energy and cost since the trial started.
* `zeus_run.trial.log`: the trial's output log.
* `zeus_run.trial.events` and `zeus_run.trial.metric_regex`: the convergence readers.
* `zeus_run.trial.proctree`: the trial's processes, found, measured and swept away.
* `zeus_run.trial.agent`: the same, next to the script (``python -m zeus_run.trial.agent PLAN.json``).
* `zeus_run.trial.classify`: what a trial was, judged on its evidence.
"""
