"""Trace loading and validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.sim_helpers import write_tiny_traces
from zeus_run.errors import SpecError, TraceError
from zeus_run.sim import JOBS, find_job, job_table, load_trace_job, load_traces


@pytest.fixture
def tiny(tmp_path):
    d = write_tiny_traces(tmp_path / "traces")
    return load_traces(d / "summary_train.csv", d / "summary_power_tiny.csv")


def test_tiny_table_joins_filters_and_caps(tiny):
    t = job_table(tiny, JOBS["squad"])
    # 64 has train rows but no power rows; the 90.0-target row is filtered out.
    assert t.batch_sizes == (8, 16)
    assert t.power_limits == (100.0, 200.0)
    assert t.max_power == 200.0
    assert t.default_batch_size == 16  # b0 32 capped at the job's largest traced batch size
    assert t.horizon == 2 * 2 * 2
    assert list(t.target_epochs[0]) == [4.0, 6.0]
    assert t.target_epochs[1][0] == 5.0 and math.isnan(t.target_epochs[1][1])
    assert np.allclose(t.time_per_epoch, [[5, 4], [10, 6]])


def test_missing_column_is_named(tmp_path):
    d = write_tiny_traces(tmp_path)
    (d / "summary_power_tiny.csv").write_text("dataset,network,batch_size,optimizer,power_limit\nsquad,b,8,adamw,100\n")
    with pytest.raises(TraceError, match="time_per_epoch"):
        load_traces(d / "summary_train.csv", d / "summary_power_tiny.csv")


def test_missing_file_and_bad_number(tmp_path):
    d = write_tiny_traces(tmp_path)
    with pytest.raises(TraceError, match="cannot read trace"):
        load_traces(d / "nope.csv", d / "summary_power_tiny.csv")
    (d / "summary_train.csv").write_text(
        "dataset,network,batch_size,optimizer,run,target_metric,target_epoch\nsquad,b,eight,adamw,1,84,3\n"
    )
    with pytest.raises(TraceError, match="batch_size = 'eight'"):
        load_traces(d / "summary_train.csv", d / "summary_power_tiny.csv")


def test_unknown_job():
    with pytest.raises(TraceError, match="unknown job 'mnist'"):
        find_job("mnist")


def test_job_without_batch_sizes(tiny):
    with pytest.raises(TraceError, match="no batch size with rows in both"):
        job_table(tiny, JOBS["imagenet"])


def test_job_spec_yaml(tmp_path, tiny):
    good = tmp_path / "job.yaml"
    good.write_text(
        "dataset: squad\nnetwork: bert_base_uncased\noptimizer: adamw\ntarget_metric: 84\nmax_epochs: 6\ndefault_batch_size: 8\n"
    )
    job = load_trace_job(good)
    assert job.name == "job" and job.target_metric == 84.0
    assert job_table(tiny, job).default_batch_size == 8
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset: squad\nmax_epochs: six\n")
    with pytest.raises(SpecError) as exc:
        load_trace_job(bad)
    fields = {p.field for p in exc.value.problems}
    assert {"network", "optimizer", "target_metric", "default_batch_size", "max_epochs"} <= fields


def test_real_traces_paper_horizons(traces_dir):
    v100 = load_traces(traces_dir / "summary_train.csv", traces_dir / "summary_power_v100.csv")
    t = job_table(v100, JOBS["librispeech"])
    assert t.default_batch_size == 192  # README: librispeech on v100 is capped at 192
    assert t.horizon == 210
