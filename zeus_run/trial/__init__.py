"""One trial of a training script: launched, metered, read and stopped.

* `zeus_run.trial.run`: launch a plan, watch its output, stop it gracefully, return an outcome.
* `zeus_run.trial.launch`: the trial's environment and the checks before the first trial.
* `zeus_run.trial.hooks`: what the runner calls back (its listener, a power-limit profiler).
* `zeus_run.trial.meter`: time, energy and cost since the trial started.
* `zeus_run.trial.log`: the trial's output log.
* `zeus_run.trial.output`: where the script's output goes (a pipe, or a pseudo-terminal: ``stdout: pty``).
* `zeus_run.trial.burst`: epochs read in one burst at the script's exit (its output was buffered).
* `zeus_run.trial.events` and `zeus_run.trial.metric_regex`: the convergence readers.
* `zeus_run.trial.proctree`: the trial's processes, found, measured and swept away.
* `zeus_run.trial.agent`: the same, next to the script (``python -m zeus_run.trial.agent PLAN.json``).

What a finished trial was, judged on its evidence, is the engine's (`zeus_run.engine.classify`), next to the
decisions it feeds.
"""
