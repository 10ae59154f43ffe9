#!/usr/bin/env python3
"""A ``run --next`` trigger's own CPU: everything a cron trigger spends besides its trial's processes.

Each trigger is ``zeus-run run job.yaml --next -q`` in a process of its own, as cron runs it, on a job whose trial
prints its metric and exits at once; its CPU (user + system, the trigger and every process it started, from
``getrusage(RUSAGE_CHILDREN)``) less that of the same trial command run bare is the trigger's own. The goal
(issue 55) is at most 0.3 s on an idle machine.

    python scripts/bench_trigger.py --triggers 10
    python scripts/bench_trigger.py --triggers 5 --importtime    # and the slowest imports of one trigger
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SPEC = """\
name: trigger
command: ["{python}", "-S", "-c", "print('val=1.0', flush=True)"]
batch_sizes: [1, 2]
default_batch_size: 1
target_metric: 0.5
recurrences: null
metric: {regex: 'val=(?P<value>[0-9.]+)'}
energy: {source: estimate, watts: 100}
"""


def cpu_of(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    """CPU seconds (user + system) of ``argv`` and everything it started."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--triggers", type=int, default=10, help="triggers measured (default 10; the first is left out)")
    ap.add_argument("--importtime", action="store_true", help="also print one trigger's 15 slowest imports")
    args = ap.parse_args(argv)
    zeus = str(Path(sys.executable).with_name("zeus-run"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED" and not k.startswith("ZEUS_")}
    with tempfile.TemporaryDirectory(prefix="bench_trigger-") as tmp:
        work = Path(tmp)
        (work / "job.yaml").write_text(SPEC)
        trigger = [zeus, "run", "job.yaml", "--next", "-q"]
        cpu_of(trigger, work, env)  # the first creates the run directory
        bare = [sys.executable, "-S", "-c", "print('val=1.0', flush=True)"]
        own, trial = [], []
        for _ in range(args.triggers):
            own.append(cpu_of(trigger, work, env))
            trial.append(cpu_of(bare, work, env))
        figure = statistics.median(own) - statistics.median(trial)
        print(
            f"run --next trigger: {statistics.median(own):.3f} s CPU with its trial, the trial bare "
            f"{statistics.median(trial):.3f} s: the trigger's own {figure:.3f} s (median of {args.triggers}; "
            f"goal 0.3 s; load {os.getloadavg()[0]:.1f})"
        )
        if args.importtime:
            done = subprocess.run(
                [sys.executable, "-X", "importtime", zeus, *trigger[1:]],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
            )
            rows = []
            for line in done.stderr.splitlines():
                if line.startswith("import time:") and "|" in line:
                    _, cumulative, name = (p.strip() for p in line.removeprefix("import time:").split("|"))
                    if cumulative.isdigit():
                        rows.append((int(cumulative), name))
            print("slowest imports (cumulative, us):")
            for us, name in sorted(rows, reverse=True)[:15]:
                print(f"  {us:>8}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
