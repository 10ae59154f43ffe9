#!/usr/bin/env python3
"""One training session of a script written for Zeus's own batch-size server, unchanged but for its GPUs.

    zeus_bso_session.py SERVER_URL METRIC[,METRIC...]

It runs the seed's client flow with Zeus 0.16's real ``BatchSizeOptimizer``:
``get_batch_size``, ``on_train_begin``, then ``on_evaluate(metric)`` per epoch
until the server says stop (or the metrics run out: the script just ends).
The doubles stand in only for what needs a GPU: ``zeus.device.get_gpus`` (one
300 W GPU) and ``ZeusMonitor`` (every epoch 10 s and 2,000 J). Prints
``batch_size B`` and, if the server stopped it unconverged, ``train failed``.
"""

import sys
from types import SimpleNamespace

import zeus.optimizer.batch_size.client as bso_client
from zeus.optimizer.batch_size.common import JobSpec
from zeus.optimizer.batch_size.exceptions import ZeusBSOTrainFailError


class OneGpu:
    """What the client asks of zeus.device's GPUs."""

    def __len__(self) -> int:
        return 1

    def get_power_management_limit_constraints(self, index: int) -> tuple[int, int]:
        return (100_000, 300_000)  # unit: mW

    def get_name(self, index: int) -> str:
        return "NVIDIA A100-SXM4-40GB"


class Monitor:
    """ZeusMonitor's window API: each window (one epoch) measures 10 s and 2,000 J."""

    def __init__(self) -> None:
        self.gpu_indices = [0]

    def begin_window(self, key: str) -> None:
        pass

    def end_window(self, key: str) -> SimpleNamespace:
        return SimpleNamespace(time=10.0, total_energy=2000.0)


bso_client.get_gpus = lambda ensure_homogeneous=False: OneGpu()
url, metrics = sys.argv[1], [float(m) for m in sys.argv[2].split(",")]
job = JobSpec(
    job_id="mnist-nightly",
    job_id_prefix="mnist",
    batch_sizes=[32, 64, 128],
    default_batch_size=64,
    target_metric=0.9,
    max_epochs=10,
    mab_seed=1,
)
bso = bso_client.BatchSizeOptimizer(Monitor(), url, job)
print("batch_size", bso.get_batch_size(), flush=True)
bso.on_train_begin()
for metric in metrics:
    try:
        bso.on_evaluate(metric)
    except ZeusBSOTrainFailError:
        print("train failed", flush=True)
        break
    if bso.training_finished:
        break
