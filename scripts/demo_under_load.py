#!/usr/bin/env python3
"""Acceptance: the demo finishes every run on a loaded machine, and load does not teach it the wrong thing.

Starts CPU hogs (``yes >/dev/null``, two by default), then runs the demo job
(configs/demo.yaml) several times, each in a fresh run directory, and checks
that every run exits 0 with all its recurrences converged. Prints one line per
run and exits 1 if any run failed. Per run: wall time, trials, tries per
recurrence (mean, max), the share of recurrences that needed more than one
try, early stops, fallback tries, the recurrences the engine found slow across
the board (`zeus_run.optimizer.early_stop`), and the steady state and whole history
against the default (`zeus-run history`'s figures). The last lines pool the
tries over all runs and count the runs whose steady state came out worse than
the default.

``--pulse ON:OFF`` switches the hogs on for ON seconds and off for OFF seconds
in turn (the real-run counterpart of ``bench_optimizer.py --noise``: some
recurrences run slow, others do not).

A threshold learned while the machine was quiet makes every trial under load
look expensive; the robust early stop of the default policy (a batch size that
converged before is never cut; at most one early stop per recurrence; a slow
recurrence is not charged to a batch size) and the CPU-time energy estimate
are what keep the runs on course.

Example:

    python scripts/demo_under_load.py                 # 10 runs beside 2 hogs (several minutes on 2 cores)
    python scripts/demo_under_load.py --runs 2 --recurrences 8
    python scripts/demo_under_load.py --runs 5 --quiet-start 3 --basis wall-time   # the harsh case
    python scripts/demo_under_load.py --runs 5 --quiet-start 3 --basis wall-time --max-early-stops null
    python scripts/demo_under_load.py --runs 3 --basis wall-time --pulse 4:12   # intermittent load
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from zeus_run.rundir.history import read_history  # noqa: E402
from zeus_run.views.recommend import believed_best  # noqa: E402
from zeus_run.views.summary import summarize  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="demo runs (default 10)")
    ap.add_argument("--hogs", type=int, default=2, help="`yes >/dev/null` processes beside it (default 2)")
    ap.add_argument("--recurrences", type=int, default=None, help="override the demo's recurrences")
    ap.add_argument("--spec", type=Path, default=REPO / "configs" / "demo.yaml")
    ap.add_argument(
        "--quiet-start",
        type=float,
        default=0.0,
        help="start the hogs this many seconds into each run, so the run learns its costs on a quiet machine first",
    )
    ap.add_argument("--basis", choices=("cpu-time", "wall-time"), default=None, help="override energy.basis")
    ap.add_argument("--max-early-stops", default=None, help="override max_early_stops (a number, or null)")
    ap.add_argument("--pulse", default=None, help="ON:OFF seconds: hogs on for ON s, then off for OFF s, in turn")
    args = ap.parse_args(argv)
    pulse = None
    if args.pulse:
        try:
            on, off = (float(x) for x in args.pulse.split(":"))
            pulse = (on, off)
        except ValueError:
            ap.error(f"--pulse {args.pulse!r}: use ON:OFF seconds, e.g. 4:12")
    tmp = Path(tempfile.mkdtemp(prefix="zeus-under-load-"))
    spec = _spec_copy(args, tmp)
    hogs: list[subprocess.Popen] = []
    failed = worse = 0
    all_tries: list[int] = []
    stop_pulse = threading.Event()
    pulser = None
    if pulse is not None:
        pulser = threading.Thread(target=_pulse, args=(args.hogs, pulse, stop_pulse), daemon=True)
        pulser.start()
    try:
        when = f"from {args.quiet_start:g} s into each run" if args.quiet_start else "running"
        if pulse is not None:
            when = f"on {pulse[0]:g} s, off {pulse[1]:g} s, in turn"
        print(f"{args.hogs} CPU hog(s) {when}; {args.runs} demo run(s) of {args.spec}")
        if args.basis or args.max_early_stops:
            print(
                f"overrides: energy.basis={args.basis or '(spec)'}, max_early_stops={args.max_early_stops or '(spec)'}"
            )
        print(
            f"{'run':>4} {'rc':>3} {'wall':>7} {'trials':>6} {'conv.':>6} {'tries':>6} {'max':>4} {'>1 try':>7} "
            f"{'early':>6} {'fallb.':>6} {'slow':>5} {'steady vs default':>18} {'history vs default':>19}"
        )
        for i in range(1, args.runs + 1):
            run_dir = tmp / f"run-{i}"
            cmd = [sys.executable, "-m", "zeus_run", "run", str(spec), "--run-dir", str(run_dir), "--no-output"]
            if args.recurrences:
                cmd += ["-n", str(args.recurrences)]
            start = time.perf_counter()
            if not args.quiet_start and pulse is None:
                hogs = hogs or _start(args.hogs)
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
            if args.quiet_start:
                try:
                    proc.wait(timeout=args.quiet_start)
                except subprocess.TimeoutExpired:
                    hogs = _start(args.hogs)
            _out, err = proc.communicate()
            r = subprocess.CompletedProcess(cmd, proc.returncode, _out, err)
            if args.quiet_start:
                _stop(hogs)
                hogs = []
            wall = time.perf_counter() - start
            hist = run_dir / "history.jsonl"
            recs = [json.loads(x) for x in hist.read_text().splitlines()] if hist.exists() else []
            want = args.recurrences or _recurrences(run_dir)
            converged = len({x["recurrence"] for x in recs if x["reached"]})
            early = sum(x["stop_reason"] == "cost_threshold" for x in recs)
            fallbacks = sum(x["stage"] == "fallback" for x in recs)
            tries = [sum(x["recurrence"] == n for x in recs) for n in sorted({x["recurrence"] for x in recs})]
            all_tries += tries
            steady, whole, slow = _figures(run_dir) if recs else ("-", "-", 0)
            worse += "more" in steady
            ok = r.returncode == 0 and converged == want
            failed += not ok
            retried = sum(t > 1 for t in tries) / len(tries) * 100 if tries else 0.0
            print(
                f"{i:>4} {r.returncode:>3} {wall:>6.1f}s {len(recs):>6} {converged:>3}/{want:<2} "
                f"{sum(tries) / max(len(tries), 1):>6.2f} {max(tries, default=0):>4} {retried:>6.1f}% "
                f"{early:>6} {fallbacks:>6} {slow:>5} {steady:>18} {whole:>19}"
            )
            if not ok:
                print("     " + (r.stderr.strip().splitlines() or ["(no output)"])[-1])
            sys.stdout.flush()
    finally:
        stop_pulse.set()
        if pulser is not None:
            pulser.join()
        _stop(hogs)
        shutil.rmtree(tmp, ignore_errors=True)
    if all_tries:
        print(
            f"tries per recurrence over all runs: mean {sum(all_tries) / len(all_tries):.3f}, max {max(all_tries)}; "
            f"recurrences with more than one try: {sum(t > 1 for t in all_tries) / len(all_tries) * 100:.1f}%"
        )
    print(f"runs whose steady state came out worse than the default: {worse}")
    print(f"{args.runs - failed}/{args.runs} runs finished with every recurrence converged")
    return 1 if failed else 0


def _figures(run_dir: Path) -> tuple[str, str, int]:
    """Steady state and whole history against the default, and the slow recurrences, as `zeus-run history` sees them."""
    records = read_history(run_dir / "history.jsonl")
    belief = believed_best(records, run_dir)
    s = summarize(records, belief=belief)

    def pct(v: float | None) -> str:
        return "-" if v is None else (f"{v * 100:.1f}% saved" if v >= 0 else f"{-v * 100:.1f}% more")

    steady = pct(s.steady.savings) if s.steady is not None else "-"
    return steady, pct(s.savings_cost), len(belief.slow)


def _pulse(n: int, pulse: tuple[float, float], stop: threading.Event) -> None:
    """Hogs on for ``pulse[0]`` s, off for ``pulse[1]`` s, until ``stop`` is set."""
    on, off = pulse
    while not stop.is_set():
        hogs = _start(n)
        stop.wait(on)
        _stop(hogs)
        stop.wait(off)


def _start(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(n)]


def _stop(hogs: list[subprocess.Popen]) -> None:
    for h in hogs:
        h.kill()
        h.wait()


def _spec_copy(args: argparse.Namespace, tmp: Path) -> Path:
    """The spec with the overrides applied (paths made absolute, since the copy lives elsewhere)."""
    import yaml

    if not (args.basis or args.max_early_stops):
        return args.spec
    data = yaml.safe_load(args.spec.read_text())
    base = args.spec.resolve().parent
    data["workdir"] = str((base / data.get("workdir", ".")).resolve())
    if args.basis:
        data.setdefault("energy", {})["basis"] = args.basis
    if args.max_early_stops:
        data["max_early_stops"] = None if args.max_early_stops == "null" else int(args.max_early_stops)
    out = tmp / args.spec.name
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def _recurrences(run_dir: Path) -> int:
    import yaml

    try:
        return int(yaml.safe_load((run_dir / "spec.yaml").read_text())["recurrences"])
    except (OSError, KeyError, TypeError, ValueError):
        return -1


if __name__ == "__main__":
    sys.exit(main())
