#!/usr/bin/env python3
"""One measurement window through every door: each door's recorded energy against ``run``'s, on the NVML double.

The same trial (tests/doors/window_train.py: 1.5 s of start-up before it reads its trial, three epochs, 0.5 s of
saving after its target) runs through ``run``, ``exec``, a plain ask/tell, the ``Job`` API, the server's client
and the framework callbacks' driver (under ``run`` and under ask/tell), on the NVML double at a constant 200 W
(tests/fake_pynvml). Each round runs every door once; the table gives each door's whole recorded span (time and
energy up to the target plus after it), its ledger (what the double drew over the trial's span: the script's
process from start to exit, or to the close where it tells itself), and the median over the rounds of its energy
against ``run``'s of the same round. The goal: every door within 5% of ``run``.

A door's start-up is CPU work (Python's imports): on a busy machine two processes take different times for it,
so run it on an idle machine for the figures.

Example:

    python scripts/bench_window.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pytest

from tests.doors.window import DOORS, run_door, whole

#: The goal: every door's energy within this share of run's.
GOAL = 0.05


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every door (default 3)")
    args = ap.parse_args()
    vs_run: dict[str, list[float]] = {name: [] for name in DOORS}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            print(f"round {k + 1}: {'door':<26}{'time s':>8}{'energy J':>10}{'ledger J':>10}{'vs run':>9}")
            run_e = None
            for name in DOORS:
                try:
                    record, ledger = run_door(name, Path(tmp) / f"{k}-{name.replace(' ', '_').replace('/', '_')}")
                except pytest.skip.Exception as exc:
                    print(f"         {name:<26}skipped: {exc}")
                    continue
                t, e = whole(record)
                run_e = e if name == "run" else run_e
                assert run_e is not None
                vs_run[name].append(e / run_e - 1)
                print(f"         {name:<26}{t:>8.2f}{e:>10.1f}{ledger:>10.1f}{e / run_e - 1:>+9.1%}")
    print(f"\nmedian over {args.rounds} round(s), energy against run's (goal: within {GOAL:.0%}):")
    worst = 0.0
    for name, diffs in vs_run.items():
        if diffs:
            m = statistics.median(diffs)
            worst = max(worst, abs(m))
            print(f"  {name:<26}{m:>+8.1%}")
    print(f"worst door: {worst:.1%} from run ({'within' if worst <= GOAL else 'OUTSIDE'} the {GOAL:.0%} goal)")
    return 0 if worst <= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
