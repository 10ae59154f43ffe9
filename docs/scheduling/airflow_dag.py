"""Airflow: one zeus-run recurrence per DAG run (a BashOperator task).

Exit code 75 means the previous recurrence still holds the run directory: the
task is skipped (``skip_on_exit_code``), not failed, and nothing piles up.
"""

from __future__ import annotations

import pendulum
from airflow import DAG
from airflow.operators.bash import BashOperator

with DAG(
    "zeus_nightly",
    schedule="0 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
) as dag:
    BashOperator(
        task_id="train",
        bash_command='cd "$HOME/jobs/nightly" && zeus-run run job.yaml --next',
        skip_on_exit_code=75,
    )
