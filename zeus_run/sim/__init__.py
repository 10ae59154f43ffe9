"""Trace-driven simulation: replay recurring jobs on the Zeus paper's traces."""

from __future__ import annotations

from zeus_run.sim._baselines import Expected, default_baseline, epoch_costs, expected, grid_search_cost, oracle_baseline
from zeus_run.sim._floors import guided_walk, informed_start
from zeus_run.sim._life import Life, NightLife
from zeus_run.sim._noise import Noise
from zeus_run.sim._simulator import SimResult, TraceExecutor, simulate
from zeus_run.sim._traces import (
    JOBS,
    JobTable,
    TraceJob,
    Traces,
    find_job,
    job_table,
    load_trace_job,
    load_traces,
    trace_gpus,
    trace_jobs,
)

__all__ = [
    "JOBS",
    "Expected",
    "JobTable",
    "Life",
    "NightLife",
    "Noise",
    "SimResult",
    "TraceExecutor",
    "TraceJob",
    "Traces",
    "default_baseline",
    "epoch_costs",
    "expected",
    "find_job",
    "grid_search_cost",
    "guided_walk",
    "informed_start",
    "job_table",
    "load_trace_job",
    "load_traces",
    "oracle_baseline",
    "simulate",
    "trace_gpus",
    "trace_jobs",
]
