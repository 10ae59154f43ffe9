"""Measure Slurm's submit-to-start latency with zeus_run.slurm, as the slurm executor will see it.

For each of N trivial jobs, submitted one after another (each after the last ended, and a random
pause of up to --jitter s, so that submissions do not line up with slurmctld's one-second loop):
  sbatch      how long `sbatch --parsable` takes to return a job id
  start       from just before sbatch to the first line of the job's script (its own clock)
  seen        from just before sbatch to squeue reporting RUNNING (or later), polling every 50 ms
  end seen    from just before sbatch to squeue reporting the job final (a job that only writes the clock)

Usage:
  scripts/slurm_dev.sh start 2 && python scripts/slurm_latency.py -n 10
  python scripts/slurm_latency.py -n 5 --partition gpu --gpus 1     # on a real cluster

Uses ZEUS_SLURM_CONF (e.g. `export ZEUS_SLURM_CONF=$(scripts/slurm_dev.sh conf)`) when SLURM_CONF is unset.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from zeus_run.slurm import BatchJob, SlurmSettings, query, submit

DEV_CONF = Path(os.environ.get("ZEUS_SLURM_CONF", "/nonexistent"))
POLL_S = 0.05
GIVE_UP_S = 300.0


def measure_one(work: Path, index: int, settings: SlurmSettings) -> dict[str, float]:
    stamp = work / f"start-{index}"
    script = f"#!/bin/sh\ndate +%s.%N > {stamp}\n"
    job = BatchJob(f"zeus-latency-{index}", script, work / f"out-{index}.log", work)
    t0 = time.time()
    job_id = submit(job, settings)
    t_submitted = time.time()
    seen = end_seen = None
    while end_seen is None:
        now = time.time()
        if now - t0 > GIVE_UP_S:
            raise SystemExit(f"job {job_id} did not end within {GIVE_UP_S:g} s; is a node free? (squeue)")
        info = query([job_id]).get(job_id)
        if info is not None and seen is None and info.state not in ("PENDING", "CONFIGURING"):
            seen = now
        if info is None or info.final:
            end_seen = now
            if info is not None and info.state != "COMPLETED":
                raise SystemExit(f"job {job_id} ended {info.state}; see {job.output}")
        time.sleep(POLL_S)
    started = float(stamp.read_text())
    return {
        "sbatch": t_submitted - t0,
        "start": started - t0,
        "seen": (seen or end_seen) - t0,
        "end seen": end_seen - t0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="jobs to submit (default 10)")
    parser.add_argument("--partition", default=None)
    parser.add_argument("--gpus", type=int, default=0, help="GPUs per job (default 0)")
    parser.add_argument("--jitter", type=float, default=1.0, help="most seconds to pause between jobs (default 1)")
    args = parser.parse_args()
    if "SLURM_CONF" not in os.environ and DEV_CONF.exists():
        os.environ["SLURM_CONF"] = str(DEV_CONF)
    print(f"cluster: SLURM_CONF={os.environ.get('SLURM_CONF', '(default)')}, {args.n} jobs, gpus {args.gpus}")
    settings = SlurmSettings(partition=args.partition, gpus=args.gpus)
    with tempfile.TemporaryDirectory(prefix="zeus-latency-", dir=Path.cwd()) as tmp:
        rng = random.Random(0)
        rows = []
        for i in range(args.n):
            time.sleep(rng.uniform(0, args.jitter))
            rows.append(measure_one(Path(tmp), i, settings))
    print(f"{'seconds':<10} {'median':>8} {'min':>8} {'max':>8}")
    for key in rows[0]:
        values = [r[key] for r in rows]
        print(f"{key:<10} {statistics.median(values):8.3f} {min(values):8.3f} {max(values):8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
