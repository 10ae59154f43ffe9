"""history's provenance lines come from the records' ``provenance`` objects, as the launcher writes them."""

from __future__ import annotations

from tests.factories import make_record
from zeus_run.records import TrialRecord
from zeus_run.views.summary import provenance


def _record(trial: int, prov: dict | None) -> TrialRecord:
    return make_record(trial, epochs=1, time=1.0, energy=10.0, cost=10.0, provenance=prov)


def test_provenance_reads_the_launchers_fields_and_lists_distinct_values():
    gpus = [{"index": 0, "name": "NVIDIA A40", "uuid": "GPU-1"}, {"index": 1, "name": "NVIDIA A40", "uuid": "GPU-2"}]
    records = [
        _record(0, {"zeus_run": "0.1.0", "host": "n1", "gpus": gpus, "slurm_job_id": "17"}),
        _record(1, {"zeus_run": "0.1.0", "host": "n2", "slurm_job_id": "18"}),
        _record(2, None),  # records from before provenance existed
    ]
    got = provenance(records)
    assert got["zeus_run"] == ("0.1.0",)
    assert got["host"] == ("n1", "n2")
    assert got["gpus"] == ("NVIDIA A40 (GPU-1), NVIDIA A40 (GPU-2)",)
    assert got["slurm_job_id"] == ("17", "18")


def test_no_provenance_no_lines():
    assert provenance([_record(0, None)]) == {}
