#!/usr/bin/env python3
"""Acceptance: the demo, killed mid-run (``kill -9`` of the launcher's process group) and resumed, beside CPU hogs.

Starts CPU hogs (``python3 -c "while 1: pass"``, two by default), then for each
run: starts the demo job (configs/demo.yaml) in a fresh run directory, in a
process group of its own, with ``PYTHONUNBUFFERED`` unset (as on users'
machines, cron and Slurm); waits until its history holds a number of records
(different for each run) and a trial is in flight; sends SIGKILL to the whole
process group; runs the same command again (it resumes); and audits the run
directory with ``zeus-run replay``. Prints one line per run and exits 1 unless
every resumed run exited 0 with every recurrence converged and every audit passed.

Example:

    python scripts/demo_kill_resume.py                 # 5 runs beside 2 hogs (several minutes on 2 cores)
    python scripts/demo_kill_resume.py --runs 2 --recurrences 8
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Records in the history at which each run is killed (cycled), so the kill lands at different points.
KILL_AT = (3, 14, 7, 11, 17)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="demo runs (default 5)")
    ap.add_argument("--hogs", type=int, default=2, help="CPU hogs beside it (default 2)")
    ap.add_argument("--recurrences", type=int, default=None, help="override the demo's recurrences")
    ap.add_argument("--spec", type=Path, default=REPO / "configs" / "demo.yaml")
    args = ap.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    tmp = Path(tempfile.mkdtemp(prefix="zeus-kill-resume-"))
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.hogs)]
    failed = 0
    try:
        print(f"{args.hogs} CPU hog(s) running; {args.runs} demo run(s) of {args.spec}, each killed and resumed")
        print(
            f"{'run':>4} {'killed at':>22} {'resume rc':>9} {'converged':>9} {'trials':>6} {'interrupted':>11} "
            f"{'env/spec err':>12} {'audit rc':>8} {'wall':>7}"
        )
        for i in range(1, args.runs + 1):
            run_dir = tmp / f"run-{i}"
            cmd = [sys.executable, "-m", "zeus_run", "run", str(args.spec), "--run-dir", str(run_dir), "--no-output"]
            if args.recurrences:
                cmd += ["-n", str(args.recurrences)]
            start = time.perf_counter()
            at = KILL_AT[(i - 1) % len(KILL_AT)]
            if args.recurrences:
                at = min(at, max(args.recurrences - 2, 1))
            killed = _run_and_kill(cmd, env, run_dir, at)
            resumed = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
            audit = subprocess.run(
                [sys.executable, "-m", "zeus_run", "replay", str(run_dir)],
                capture_output=True,
                text=True,
                cwd=REPO,
                env=env,
            )
            recs = _records(run_dir)
            want = args.recurrences or _recurrences(run_dir)
            converged = len({r["recurrence"] for r in recs if r["reached"]})
            interrupted = sum(r["stop_reason"] == "interrupted" for r in recs)
            errors = sum(r["stop_reason"] in ("config_error", "environment_error") for r in recs)
            ok = resumed.returncode == 0 and converged == want and audit.returncode == 0 and errors == 0
            failed += not ok
            print(
                f"{i:>4} {killed:>22} {resumed.returncode:>9} {converged:>4}/{want:<4} {len(recs):>6} "
                f"{interrupted:>11} {errors:>12} {audit.returncode:>8} {time.perf_counter() - start:>6.1f}s"
            )
            if not ok:
                for text in (resumed.stderr, audit.stderr, audit.stdout):
                    for line in text.strip().splitlines()[-4:]:
                        print("     " + line)
            sys.stdout.flush()
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{args.runs - failed}/{args.runs} runs killed, resumed, exit 0, every recurrence converged, audit passed")
    return 1 if failed else 0


def _run_and_kill(cmd: list[str], env: dict[str, str], run_dir: Path, at: int) -> str:
    """Start ``cmd`` in a process group of its own; SIGKILL the group once ``at`` records are in and a trial runs."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=env, start_new_session=True
    )
    try:
        while proc.poll() is None:
            n = len(_records(run_dir))
            if n >= at and (run_dir / "running.json").exists():
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return f"{n} records, trial in flight"
            time.sleep(0.05)
        return f"(ended first, rc {proc.returncode})"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _records(run_dir: Path) -> list[dict]:
    try:
        lines = (run_dir / "history.jsonl").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:  # a torn last line, being written
            pass
    return out


def _recurrences(run_dir: Path) -> int:
    import yaml

    try:
        return int(yaml.safe_load((run_dir / "spec.yaml").read_text())["recurrences"])
    except (OSError, KeyError, TypeError, ValueError):
        return -1


if __name__ == "__main__":
    sys.exit(main())
