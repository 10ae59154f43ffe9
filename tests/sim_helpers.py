"""A tiny hand-made trace directory (squad job, two batch sizes, two power limits) for the simulator tests.

Epoch cost at eta 0.5, max power 200 W: 0.5 * P * t + 0.5 * 200 * t.
  bs 8:  pl 100: t 5, P 90  -> 725 J;  pl 200: t 4, P 180 -> 760 J   (best: 100)
  bs 16: pl 100: t 10, P 80 -> 1400 J; pl 200: t 6, P 150 -> 1050 J  (best: 200)
Runs: bs 8 reach the target at epochs 4 and 6; bs 16 at 5 and never.
"""

from __future__ import annotations

from pathlib import Path

TRAIN = """dataset,network,batch_size,optimizer,learning_rate,run,target_metric,target_epoch
squad,bert_base_uncased,8,adamw,1e-5,1,84.0,4
squad,bert_base_uncased,8,adamw,1e-5,2,84.0,6
squad,bert_base_uncased,8,adamw,1e-5,1,90.0,
squad,bert_base_uncased,16,adamw,1e-5,1,84,5
squad,bert_base_uncased,16,adamw,1e-5,2,84.0,
squad,bert_base_uncased,64,adamw,1e-5,1,84.0,2
"""

POWER = """dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power
squad,bert_base_uncased,8,adamw,100,5,90
squad,bert_base_uncased,8,adamw,200,4,180
squad,bert_base_uncased,16,adamw,100,10,80
squad,bert_base_uncased,16,adamw,200,6,150
cifar100,shufflenetv2,32,adadelta,200,1,100
"""


def write_tiny_traces(directory: Path, gpu: str = "tiny") -> Path:
    """Write summary_train.csv and summary_power_<gpu>.csv into ``directory``; return it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "summary_train.csv").write_text(TRAIN)
    (directory / f"summary_power_{gpu}.csv").write_text(POWER)
    return directory
