"""What a person sees of a history: pure functions of the records, rendered by the CLI.

* `zeus_run.views.summary`: the summaries ``zeus-run history`` shows.
* `zeus_run.views.recommend`: the setting to recommend.
* `zeus_run.views.jobs`: a run directory read as one job, one line per job.
* `zeus_run.views.plot` and `zeus_run.views.plot_jobs`: pictures of one job and of many.
* `zeus_run.views.report`: a self-contained HTML report.
"""
