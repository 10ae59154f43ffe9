#!/usr/bin/env python3
"""A training process that someone else launches: it asks, trains with zeus_run.train.Trial, and tells.

    ask_worker.py SPEC HOLD_FILE [EPOCH_TIME]

After its first epoch it waits until HOLD_FILE exists (so a test can catch it mid-trial), then
trains until Trial says stop and tells. Batch size b reaches the target after {2: 2, 4: 3}[b]
epochs (1: never). Writes its trial directory to stdout after the ask.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from zeus_run.asktell import ask, tell
from zeus_run.train import Trial

spec, hold = sys.argv[1], sys.argv[2]
epoch_time = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
a = ask(spec)
print(a.trial_dir, flush=True)
os.environ.update(a.env)
trial = Trial.from_env()  # renews the ask's lease from a thread of its own
need = {2: 2, 4: 3}.get(trial.batch_size, 0)
for epoch in trial.epochs():
    time.sleep(epoch_time)
    trial.report(1.0 if need and epoch >= need else 0.5)
    while not os.path.exists(hold):
        time.sleep(0.02)
trial.close()
tell(a.run_dir, a.token, exit_code=0)
