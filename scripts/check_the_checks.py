#!/usr/bin/env python3
"""Check the checks: plant each bug the energy checks exist to catch, one at a time, and see that they catch it.

    python scripts/check_the_checks.py            # every plant against its door tests and job_life's short form
    python scripts/check_the_checks.py --quick    # every plant against its door tests only (.ci/run; ~3 min)
    python scripts/check_the_checks.py --only dropped-record,start-late --keep

Each plant is a small textual mutation of one file, found by an exact anchor that must occur once (`PLANTS`, the
one table to re-anchor when the code moves). For each plant the script copies the tree's files (``git ls-files``:
tracked and untracked-but-not-ignored) into a temporary directory, applies the plant there, and runs the checks
named for it from that copy (``PYTHONPATH`` = the copy, so zeus-run's code, its tests and ``scripts/job_life.py``
are the copy's); a check that fails has caught the bug. First every check runs once on an unplanted copy: a check
that fails without a bug catches nothing. Then it prints a table (bug, what caught it, caught yes/no) and exits 0
only when every plant was caught by at least one of its checks and every check passed unplanted.

The checks are the door tests' truths, none taken from zeus-run's own code: the NVML double's energy over the
process's life (tests/doors, the ledger read from ``/proc``), hand-computed spans (tests/asktell), a server's answer
and log (tests/server), the orphan's own file (tests/executors), and job_life's ledger of the double's true power
(scripts/job_life.py, full form only: a 10-night life takes minutes).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_WINDOW = "tests/doors/test_window.py::test_every_door_charges_the_trials_whole_span_at_what_the_gpu_drew"

#: The checks, by name: a pytest node id (run with ``python -m pytest``) or ``job_life`` (its short form).
CHECKS: dict[str, str] = {
    "window[Job API]": f"{_WINDOW}[Job API]",
    "window[ask/tell]": f"{_WINDOW}[ask/tell]",
    "expired lease charged": (
        "tests/asktell/test_asktell_api.py::test_an_expired_ask_is_charged_its_span_at_the_jobs_measured_power"
    ),
    "full disk: epochs": "tests/server/test_full_disk.py::test_a_full_disk_is_answered_as_a_refusal_never_a_500[epochs]",
    "orphan that prints": (
        "tests/executors/test_orphans.py::test_an_orphan_that_prints_every_epoch_survives_its_launcher_and_is_adopted"
    ),
    "orphan adopted": (
        "tests/executors/test_orphans.py::"
        "test_a_trial_that_reached_its_target_while_the_launcher_was_dead_is_recorded_reached"
    ),
    "estimate said": "tests/cli/test_run_cli.py::test_converging_trial",
    "tail after the tell": (
        "tests/doors/test_whole_process.py::test_each_trial_is_charged_its_part_of_the_process_as_the_double_drew_it[Job API]"
    ),
    "start-up estimate said": (
        "tests/doors/test_whole_process.py::test_a_trial_that_asked_for_itself_says_its_start_up_was_estimated"
    ),
    "job_life": "job_life",
}


@dataclass(frozen=True)
class Plant:
    """One planted bug: in ``path``, the text ``anchor`` (exactly once) becomes ``planted``.

    Attributes:
        key: Short name (``--only``).
        bug: What the bug is, for the table.
        path: The file, relative to the tree's root.
        anchor: Exact text that must occur once in it.
        planted: What it becomes.
        quick: The checks (`CHECKS` names) of the quick form.
        full: The further checks of the full form.
        note: Where the plant stands in for a feature not built here (re-anchor it when that lands).
    """

    key: str
    bug: str
    path: str
    anchor: str
    planted: str
    quick: tuple[str, ...]
    full: tuple[str, ...] = ("job_life",)
    note: str = ""

    def checks(self, quick: bool) -> tuple[str, ...]:
        return self.quick if quick else self.quick + self.full


#: The planted bugs (issue 46, item 6): one table, each a small mutation with a clear anchor.
PLANTS: tuple[Plant, ...] = (
    Plant(
        "under-charge",
        "a door that under-charges 5% (the Job API's measurement)",
        "zeus_run/asktell/_job.py",
        "                measured = Measured.of(*m)\n",
        "                measured = Measured.of(*m)\n"
        "                measured = dataclasses.replace(measured, energy=measured.energy * 0.95)\n",
        ("window[Job API]",),
    ),
    Plant(
        "dropped-record",
        "a dropped record (an ask's record never saved)",
        "zeus_run/asktell/_session.py",
        "        self.saver.save(record)\n",
        "        pass  # planted: the record is dropped\n",
        ("window[ask/tell]",),
    ),
    Plant(
        "start-late",
        "the process start read 0.5 s late",
        "zeus_run/contract/_process.py",
        "    return now - max(age, 0.0)\n",
        "    return now - max(age, 0.0) + 0.5\n",
        ("window[ask/tell]",),
    ),
    Plant(
        "tail-uncharged",
        "the part after the target not charged (told by the script)",
        "zeus_run/asktell/_outcome.py",
        "after_energy=max(total_e - e, 0.0) if decided",
        "after_energy=0.0 if decided",
        ("window[ask/tell]",),
    ),
    Plant(
        "tail-after-tell-uncharged",
        "a tail after an in-process tell not charged (the Job block's end to the process's exit)",
        "zeus_run/rundir/tails.py",
        "    after_energy = (r.after_energy or 0.0) + e\n",
        "    after_energy = r.after_energy or 0.0\n",
        ("tail after the tell",),
    ),
    Plant(
        "imputed-tenth",
        "imputed energy at a tenth",
        "zeus_run/engine/measure.py",
        'return statistics.median(powers) * time, Measurement(UNMEASURED, True, "imputed")',
        'return statistics.median(powers) * time / 10, Measurement(UNMEASURED, True, "imputed")',
        ("expired lease charged",),
    ),
    Plant(
        "server-500",
        "a server 500 with a traceback (a full disk during POST .../epochs)",
        "zeus_run/asktell/_tell.py",
        "        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):\n            raise\n",
        "        raise\n",
        ("full disk: epochs",),
    ),
    Plant(
        "orphan-ignored",
        "an orphan's finished epochs ignored (never adopted)",
        "zeus_run/executors/_local.py",
        "            if may_adopt and exited and info.trial_dir and _reached_alone(info):\n",
        "            if False:  # planted: a finished orphan is never adopted\n",
        ("orphan that prints", "orphan adopted"),
    ),
    Plant(
        "orphan-pipe",
        "an orphan that prints dies with its launcher's pipe (no relay)",
        "zeus_run/trial/output.py",
        "        elif (argv := relay_argv()) is not None:\n",
        "        elif False and (argv := relay_argv()) is not None:\n",
        ("orphan that prints",),
    ),
    Plant(
        "estimate-as-measured",
        "an estimate labelled as a measurement",
        "zeus_run/energy/_estimate.py",
        '    name = "estimate"\n    estimated = True\n',
        '    name = "estimate"\n    estimated = False\n',
        ("estimate said",),
    ),
    Plant(
        "start-up-estimate-as-measured",
        "a start-up estimate labelled as a measurement",
        "zeus_run/engine/record.py",
        '    return {"estimated": True, "estimated_energy": float(part), "estimated_share": share}\n',
        '    return {"estimated": False, "estimated_energy": float(part), "estimated_share": share}\n',
        ("start-up estimate said", "window[Job API]"),
    ),
)

#: Longest a check may run (unit: s); one that runs longer counts as failed (caught), and says so.
CHECK_TIMEOUT = {"job_life": 1800.0}
DEFAULT_TIMEOUT = 600.0


class AnchorError(Exception):
    """A plant's anchor is not in its file exactly once: re-anchor it (`PLANTS`)."""


def tree_files(root: Path) -> list[str]:
    """The tree's files: tracked, and untracked but not ignored (what a clone with this work would hold)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    return [f for f in out.decode().split("\0") if f and (root / f).is_file()]


def copy_tree(root: Path, dest: Path) -> Path:
    """A copy of the tree's files under ``dest``; returns it."""
    for rel in tree_files(root):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    return dest


def apply(plant: Plant, tree: Path) -> None:
    """Plant the bug in the copy ``tree``.

    Raises:
        AnchorError: The anchor is not in the file exactly once.
    """
    path = tree / plant.path
    text = path.read_text(encoding="utf-8")
    n = text.count(plant.anchor)
    if n != 1:
        raise AnchorError(
            f"{plant.key}: its anchor occurs {n} times in {plant.path} (it must occur once): re-anchor it"
        )
    path.write_text(text.replace(plant.anchor, plant.planted), encoding="utf-8")


@dataclass(frozen=True)
class Result:
    check: str
    passed: bool
    seconds: float
    tail: str


def run_check(name: str, tree: Path) -> Result:
    """Run one check from the copy ``tree``: passed (exit 0) or not, and the last lines of its output."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED" and not k.startswith("ZEUS_")}
    env["PYTHONPATH"] = str(tree)
    what = CHECKS[name]
    if what == "job_life":
        argv = [sys.executable, str(tree / "scripts" / "job_life.py"), "--nights", "10", "-q"]
    else:
        argv = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", "-p", "no:cacheprovider"]
        argv += ["-n", "0", "-o", "addopts=", what]
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            argv, cwd=tree, env=env, capture_output=True, text=True, timeout=CHECK_TIMEOUT.get(name, DEFAULT_TIMEOUT)
        )
        passed, out = done.returncode == 0, done.stdout + done.stderr
        last = out.strip().splitlines()[-1] if out.strip() else ""
        if what != "job_life" and " passed" not in last:  # skipped: a check that does not run catches nothing
            passed, out = False, out + "\n(it ran no test)"
    except subprocess.TimeoutExpired:
        passed, out = False, f"(ran past {CHECK_TIMEOUT.get(name, DEFAULT_TIMEOUT):.0f} s)"
    lines = out.strip().splitlines()
    tail = "\n".join([ln for ln in lines if ln.startswith(("E ", "  ✗"))][:3] + lines[-3:])
    return Result(name, passed, time.monotonic() - t0, tail)


def why(tail: str) -> str:
    """The line of a failed check's output that says what it saw (an assertion, a violation, a summary)."""
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    for mark in ("E ", "✗", "FAILED", "job_life: FAIL"):
        hits = [ln for ln in lines if ln.startswith(mark)]
        if hits:
            return hits[0][:150]
    return (lines or ["(no output)"])[-1][:150]


def try_plant(plant: Plant | None, checks: Sequence[str], work: Path) -> list[Result]:
    """Copy the tree, plant ``plant`` (None: the baseline), run ``checks`` there."""
    tree = copy_tree(REPO, work / (plant.key if plant else "baseline"))
    if plant is not None:
        apply(plant, tree)
    return [run_check(c, tree) for c in checks]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="Door tests only (no job_life): the form .ci/run runs.")
    ap.add_argument("--only", default="", help=f"Plants to try, comma-separated ({', '.join(p.key for p in PLANTS)}).")
    ap.add_argument("--jobs", type=int, default=2, help="Plants tried at once (default 2).")
    ap.add_argument("--keep", action="store_true", help="Keep the planted copies (their paths are printed).")
    args = ap.parse_args(argv)
    only = {k for k in args.only.split(",") if k}
    unknown = only - {p.key for p in PLANTS}
    if unknown:
        ap.error(f"unknown plant(s) {sorted(unknown)}: the plants are {', '.join(p.key for p in PLANTS)}")
    plants = [p for p in PLANTS if not only or p.key in only]
    work = Path(tempfile.mkdtemp(prefix="check_the_checks-"))
    for p in plants:  # every anchor first, in the tree itself: a stale one is named before anything runs
        if (REPO / p.path).read_text(encoding="utf-8").count(p.anchor) != 1:
            print(f"check_the_checks: {p.key}: its anchor is not in {p.path} exactly once: re-anchor it (PLANTS)")
            return 1
    used = sorted({c for p in plants for c in p.checks(args.quick)})
    form = "quick (door tests)" if args.quick else "full (door tests and job_life --nights 10)"
    print(f"check_the_checks: {len(plants)} plant(s), {form}, {len(used)} check(s); work directory {work}", flush=True)
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        base_f = pool.submit(try_plant, None, used, work)
        futures = {p.key: pool.submit(try_plant, p, p.checks(args.quick), work) for p in plants}
        baseline = base_f.result()
        results = {k: f.result() for k, f in futures.items()}
    ok = True
    print(f"\n{'check':<24}unplanted")
    for r in baseline:
        print(f"{r.check:<24}{'passes' if r.passed else 'FAILS'} ({r.seconds:.0f} s)")
        if not r.passed:
            ok = False
            print("    " + r.tail.replace("\n", "\n    "))
    print(f"\n{'bug':<72}{'caught':<8}what caught it")
    for p in plants:
        caught = [r.check for r in results[p.key] if not r.passed]
        missed = [r.check for r in results[p.key] if r.passed]
        ok = ok and bool(caught)
        by = ", ".join(caught) if caught else f"nothing ({', '.join(missed)} passed)"
        print(f"{p.bug[:70]:<72}{'yes' if caught else 'NO':<8}{by}")
        for r in results[p.key]:
            if not r.passed:
                print(f"{'':<4}{r.check}: {why(r.tail)}")
        if p.note:
            print(f"{'':<4}({p.note})")
    verdict = "every planted bug caught" if ok else "a planted bug went uncaught, or a check fails unplanted"
    print(f"\ncheck_the_checks: {'PASS' if ok else 'FAIL'}: {verdict} ({time.monotonic() - t0:.0f} s)")
    if args.keep:
        print(f"kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
