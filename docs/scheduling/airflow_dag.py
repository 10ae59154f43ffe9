"""Airflow 3: one zeus-run recurrence per DAG run (a BashOperator task).

Exit code 75 means the previous recurrence still holds the run directory: the
task is skipped (``skip_on_exit_code``), not failed, and nothing piles up.
"""

from __future__ import annotations

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import dag


@dag(
    schedule="0 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
)
def zeus_nightly():
    BashOperator(
        task_id="train",
        bash_command='cd "$HOME/jobs/nightly" && "$HOME/jobs/nightly/.venv/bin/zeus-run" run job.yaml --next -q',
        skip_on_exit_code=75,
    )


zeus_nightly()
