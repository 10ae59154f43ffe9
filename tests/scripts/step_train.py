"""A fake training script for power-limit tests: steps through iterations, reports a rising metric."""

import sys
import time

from zeus_run.train import Trial

ITERS = int(sys.argv[1]) if len(sys.argv) > 1 else 100
SLEEP = float(sys.argv[2]) if len(sys.argv) > 2 else 0.005

trial = Trial.from_env(batch_size=32, max_epochs=4, target_metric=0.9)
for epoch in trial.epochs():
    for _ in trial.iterate(range(ITERS)):
        time.sleep(SLEEP)
    trial.report(0.34 * epoch)  # reaches 0.9 at epoch 3
trial.close()
