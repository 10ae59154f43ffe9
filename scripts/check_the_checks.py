#!/usr/bin/env python3
"""Check the checks: plant each bug the energy checks exist to catch, one at a time, and see that they catch it.

    python scripts/check_the_checks.py            # every plant against its door tests and job_life's short form
    python scripts/check_the_checks.py --quick    # every plant against its door tests only (scripts/test_heavy.sh)
    python scripts/check_the_checks.py --only dropped-record,start-late --keep

Each plant is a small textual mutation of one file, found by an exact anchor that must occur once (`PLANTS`, the
one table to re-anchor when the code moves; a moved anchor is named, "plant did not apply", before anything runs).
The tree's files (``git ls-files``: tracked and untracked-but-not-ignored) are copied once into a temporary
directory and compiled there; each plant gets a tree of hard links to that copy with its one file replaced, and its
checks run from it in one pytest process (``PYTHONPATH`` = that tree, so zeus-run's code, its tests and
``scripts/job_life.py`` are the planted ones). First every check runs once on an unplanted tree: a check that fails
without a bug catches nothing.

A plant counts as caught only where a named test fails on an assertion: pytest's junit report gives that test a
failure (no error) raised by an ``AssertionError``. An import error, a crash in a fixture or in the code, a skip and
a timeout catch nothing (job_life catches only by a violated invariant, a ``✗`` line). The table gives each plant,
the test that caught it and how (the assertion's first line); it exits 0 only when every plant was caught and every
check passed unplanted.

The checks are the door tests' truths, none taken from zeus-run's own code: the NVML double's energy over the
process's life (tests/doors, the ledger read from ``/proc``), hand-computed spans (tests/asktell), a server's answer
and log (tests/server), the orphan's own file (tests/executors), and job_life's ledger of the double's true power
(scripts/job_life.py --short, full form only: its 9 nights take minutes).
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
from typing import Any

REPO = Path(__file__).resolve().parents[1]

_WINDOW = "tests/doors/test_window.py::test_every_door_charges_the_trials_whole_span_at_what_the_gpu_drew"

#: The checks, by name: a pytest node id (run with ``python -m pytest``) or ``job_life`` (its short form).
CHECKS: dict[str, str] = {
    "window[Job API]": f"{_WINDOW}[Job API]",
    "window[ask/tell]": f"{_WINDOW}[ask/tell]",
    "ask/tell saved": "tests/asktell/test_asktell_api.py::test_ask_then_tell_records_a_trial_and_the_history_audits",
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
    "orphan read by regex": (
        "tests/executors/test_orphans.py::"
        "test_an_orphan_whose_metric_is_read_by_regex_is_adopted_reached_with_its_whole_process"
    ),
    "estimate said": "tests/cli/test_run_cli.py::test_converging_trial",
    "tail after the tell": (
        "tests/doors/test_whole_process.py::test_each_trial_is_charged_its_part_of_the_process_as_the_double_drew_it[Job API]"
    ),
    "start-up estimate said": (
        "tests/doors/test_whole_process.py::test_a_trial_that_asked_for_itself_says_its_start_up_was_estimated"
    ),
    "jobs view: estimate said": (
        "tests/export/test_jobs.py::test_a_folder_of_run_directories_reads_as_its_jobs_in_every_format"
    ),
    "torn line repaired": (
        "tests/rundir/test_history.py::test_torn_last_line_is_ignored_with_a_warning_and_cut_before_appending"
    ),
    "unphysical tell refused": "tests/server/test_limits.py::test_unphysical_tells_get_422_and_two_idempotency_keys_400",
    "ask-counter share": (
        "tests/energy/test_ask_counter.py::test_the_start_up_is_the_counters_difference_since_the_ask"
    ),
    "spec error in a crash": (
        "tests/engine/test_classify.py::test_a_placeholder_the_script_rejects_is_a_configuration_error"
    ),
    "tail: bound": (
        "tests/server/test_tail.py::test_a_tail_beyond_the_finishs_bound_is_refused_and_the_genuine_one_lands_after_it"
    ),
    "tail: never told": "tests/server/test_tail.py::test_a_tail_for_a_token_never_asked_is_404_and_nothing_is_appended",
    "tail: one per trial": "tests/server/test_tail.py::test_one_tail_per_trial_the_same_one_again_accepted_another_409",
    "tail: told, once": "tests/rundir/test_tails.py::test_a_tail_is_recorded_only_for_a_told_trial_and_once",
    "OOM: one night": (
        "tests/engine/test_oom_one_night.py::test_a_one_night_oom_of_the_best_batch_size_does_not_keep_it_away_for_ever"
    ),
    "OOM: no view recommends": (
        "tests/engine/test_oom_one_night.py::test_while_the_best_batch_size_is_shut_out_no_view_recommends_it"
    ),
    "OOM: a simulated life": (
        "tests/sim/test_sim_life.py::test_a_one_night_oom_of_the_oracles_batch_size_does_not_keep_it_away"
    ),
    "OOM: history recommends": (
        "tests/sim/test_sim_life.py::test_after_a_one_night_oom_history_recommends_what_the_decisions_may_run"
    ),
    "nights: OOM rule": (
        "tests/views/test_nights.py::test_an_oom_above_the_default_is_zeus_runs_alone_at_or_below_it_both_sides"
    ),
    "nights: partial tries": "tests/views/test_nights.py::test_crashed_partial_tries_are_no_evidence_of_a_slow_machine",
    "control within its share": (
        "tests/views/test_default_from_more_runs.py::"
        "test_a_control_runs_while_the_saving_is_too_wide_and_only_within_its_share"
    ),
    "relay logs on": (
        "tests/trial/test_output.py::test_the_relay_needs_no_gnu_tee_and_logs_on_after_its_reader_is_gone"
    ),
    "typo cut": (
        "tests/engine/test_classify.py::test_a_typo_cut_by_the_cost_threshold_is_a_spec_error_never_an_observation"
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
        ("window[ask/tell]", "ask/tell saved"),
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
    # Beyond the energy window (issue 54, item 5): one plant in each of views/, rundir/, server/ and energy/.
    Plant(
        "views-estimate-unsaid",
        "a history of estimates shown as measured (the summary's estimated flag dropped)",
        "zeus_run/views/summary.py",
        "        estimated=any(whole_estimate(r) for r in records),\n",
        "        estimated=False,\n",
        ("jobs view: estimate said",),
    ),
    Plant(
        "rundir-torn-cut-too-far",
        "the repair of a torn last line of history.jsonl cuts the record before it too",
        "zeus_run/rundir/history.py",
        '                cut = data.rstrip(b"\\n").rfind(b"\\n") + 1\n',
        '                cut = data.rstrip(b"\\n").rfind(b"\\n")\n',
        ("torn line repaired",),
    ),
    Plant(
        "server-energy-unbounded",
        "the server takes any finite energy (the plausibility bound on a tell dropped)",
        "zeus_run/server/_limits.py",
        "    if not (math.isfinite(energy) and energy <= bound):\n",
        "    if not math.isfinite(energy):\n",
        ("unphysical tell refused",),
    ),
    Plant(
        "energy-ask-counter-whole",
        "the ask-counter start-up charged the whole span since the ask (not the process's share)",
        "zeus_run/energy/_self.py",
        "                share = min(self._pre_t / span, 1.0) if span > 0 else 1.0",
        "                share = 1.0",
        ("ask-counter share",),
    ),
    Plant(
        "spec-error-as-crash",
        "a spec error in a crash's output taken as the batch size's crash (the spec-error rule dropped)",
        "zeus_run/engine/classify.py",
        "            return Finding(Verdict.SPEC_ERROR, CONFIG_ERROR, *spec)\n",
        "            return _failure(record, reason)\n",
        ("spec error in a crash",),
    ),
    # The rules merged with issue 54 (the tail's route, the OOM ceiling, the bad-night rule, the controls, the
    # relay, the typo rule): none of them is an energy window, so job_life is not among their checks.
    Plant(
        "tail-never-told-accepted",
        "a tail for a token never told accepted (the 404 dropped)",
        "zeus_run/rundir/tails.py",
        "    if not told:\n",
        "    if False:  # planted: any token's tail is taken\n",
        ("tail: never told", "tail: told, once"),
        (),
    ),
    Plant(
        "tail-second-accepted",
        "a second, different tail of a trial accepted (the 409 dropped)",
        "zeus_run/rundir/tails.py",
        '                if (earlier["time"], earlier["energy"], earlier["to"]) == (line["time"], line["energy"], '
        'line["to"]):\n',
        "                if True:  # planted: another tail passes as a retry\n",
        ("tail: one per trial", "tail: told, once"),
        (),
    ),
    Plant(
        "server-tail-unbounded",
        "a tail through the server not held to the finish's energy bound",
        "zeus_run/server/_jobs.py",
        "        check_energy(path, body.time, body.energy, None)  # the bound a finish is held to\n",
        "        pass  # planted: the tail's energy unbounded\n",
        ("tail: bound",),
        (),
    ),
    Plant(
        "views-recommend-banned",
        "a recommendation that ignores the out-of-memory shut-out",
        "zeus_run/views/recommend.py",
        "        return ceiling is None or b < ceiling\n",
        "        return True  # planted: the ban ignored\n",
        ("OOM: no view recommends", "OOM: history recommends"),
        (),
    ),
    Plant(
        "leader-banned",
        "the optimizer's leader (belief.json) given though it is shut out",
        "zeus_run/engine/ledger.py",
        "        if lead is None or ceiling is None or lead < ceiling:\n",
        "        if True:  # planted: the leader ignores the ban\n",
        ("OOM: no view recommends",),
        (),
    ),
    Plant(
        "oom-ban-for-ever",
        "an out-of-memory shut-out that never lifts (a one-night OOM keeps the batch size away)",
        "zeus_run/engine/memory.py",
        "        return self.until is None or reached < self.until\n",
        "        return True  # planted: a ban never lapses\n",
        ("OOM: one night", "OOM: a simulated life"),
        (),
    ),
    Plant(
        "nights-oom-both-sides",
        "an out-of-memory crash above the default charged to the default's side too",
        "zeus_run/views/nights.py",
        "    return default_batch_size is not None and record.batch_size <= default_batch_size and "
        "out_of_memory_try(record)\n",
        "    return out_of_memory_try(record)  # planted: every OOM hits the default\n",
        ("nights: OOM rule",),
        (),
    ),
    Plant(
        "nights-partial-as-slow",
        "a crashed try's partial epoch read as a slow machine",
        "zeus_run/views/nights.py",
        "    if not at_boundary(record):\n        return None\n",
        "",
        ("nights: partial tries",),
        (),
    ),
    Plant(
        "control-beyond-share",
        "a control run beyond its share of the spend (saving.control.max_share ignored)",
        "zeus_run/engine/control.py",
        "    if s.extra + cost > max_share * (s.spent + s.default_mean):\n        return None\n",
        "",
        ("control within its share",),
        (),
    ),
    Plant(
        "relay-stops-logging",
        "the relay stops writing the log once its reader (the launcher) is gone",
        "zeus_run/trial/output.py",
        "        except OSError:out=-1\n",
        "        except OSError:out=-1;log=-1\n",
        ("relay logs on", "orphan read by regex"),
        (),
    ),
    Plant(
        "typo-cut-observed",
        "a typo cut by the cost threshold taken as the batch size's observation (not a spec error)",
        "zeus_run/engine/classify.py",
        "        if cut is not None:\n            return cut\n",
        "        pass  # planted: the cut stands\n",
        ("typo cut",),
        (),
    ),
)

#: Longest a check may run (unit: s); one that runs longer has not caught anything, and says so.
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


def copy_tree(root: Path, dest: Path, files: Sequence[str] | None = None) -> Path:
    """A copy of the tree's files under ``dest``; returns it."""
    for rel in tree_files(root) if files is None else files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    return dest


def link_tree(base: Path, dest: Path) -> Path:
    """A tree of hard links to ``base``'s files under ``dest`` (its own directories, so what a run writes, a
    ``.pyc``, stays its own): every plant shares the one copy and its compiled modules. A plant replaces its file
    (`apply` unlinks it first), never writes through a link. Falls back to a copy where links are refused."""
    for dirpath, _dirs, names in os.walk(base):
        here = dest / Path(dirpath).relative_to(base)
        here.mkdir(parents=True, exist_ok=True)
        for name in names:
            try:
                os.link(Path(dirpath) / name, here / name)
            except OSError:
                shutil.copy2(Path(dirpath) / name, here / name)
    return dest


def apply(plant: Plant, tree: Path) -> None:
    """Plant the bug in the copy ``tree`` (a new file: the shared copy's link to it is left as it was).

    Raises:
        AnchorError: The anchor is not in the file exactly once.
    """
    path = tree / plant.path
    text = path.read_text(encoding="utf-8")
    n = text.count(plant.anchor)
    if n != 1:
        raise AnchorError(
            f"{plant.key}: plant did not apply: its anchor occurs {n} times in {plant.path} (it must occur once): "
            "re-anchor it (PLANTS)"
        )
    path.unlink()
    path.write_text(text.replace(plant.anchor, plant.planted), encoding="utf-8")


#: A check's verdicts: it passed; it failed on an assertion (the only failure that catches a bug); it failed
#: otherwise (an error in a fixture or at import, an exception that is not an assertion, a timeout, no test run).
PASSED, ASSERTION, BROKE = "passed", "assertion", "broke"


@dataclass(frozen=True)
class Result:
    check: str
    verdict: str
    seconds: float
    how: str  # what it saw: the assertion's first line, or why it broke

    @property
    def passed(self) -> bool:
        return self.verdict == PASSED


def junit_key(node: str) -> tuple[str, str]:
    """The (classname, name) pytest's junit report gives the test ``node`` (a pytest node id)."""
    path, *parts = node.split("::")
    module = path.removesuffix(".py").replace("/", ".")
    return ".".join([module, *parts[:-1]]), parts[-1]


def junit_verdicts(report: Path, nodes: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Each node's verdict and what it saw, from pytest's junit report: an assertion only where the test itself
    failed (``<failure>``, no ``<error>``) and what failed is an ``AssertionError`` (a bare ``assert`` too)."""
    import xml.etree.ElementTree as ET

    cases = {(c.get("classname", ""), c.get("name", "")): c for c in ET.parse(report).iter("testcase")}
    out: dict[str, tuple[str, str]] = {}
    for node in nodes:
        key = junit_key(node)
        found = (
            [cases[key]]
            if key in cases
            else [c for k, c in cases.items() if k[0] == key[0] and k[1].startswith(key[1] + "[")]
        )
        if not found:  # (a node without its parameters names every parametrized case)
            out[node] = (BROKE, "not run (not collected: an import error?)")
            continue
        verdicts = [_verdict(case) for case in found]
        out[node] = next((v for v in verdicts if v[0] == ASSERTION), None) or next(
            (v for v in verdicts if v[0] == BROKE), verdicts[0]
        )
    return out


def _verdict(case: Any) -> tuple[str, str]:
    """One junit test case's verdict and what it saw."""
    errors, failures = case.findall("error"), case.findall("failure")
    if case.find("skipped") is not None and not failures:
        return BROKE, "skipped: " + (case.find("skipped").get("message") or "")[:120]
    if errors:
        return BROKE, "error (not an assertion): " + _first(errors[0].get("message"))
    if failures:
        message = failures[0].get("message") or ""
        text = (failures[0].text or "") + message
        if message.startswith(("assert ", "AssertionError")) or "\nE       AssertionError" in text:
            return ASSERTION, _first(message)
        return BROKE, "failed, not on an assertion: " + _first(message)
    return PASSED, ""


def _first(message: str | None) -> str:
    lines = [ln.strip() for ln in (message or "").splitlines() if ln.strip()]
    return (lines[0] if lines else "(no message)")[:150]


def run_pytest(names: Sequence[str], tree: Path, report: Path) -> list[Result]:
    """Run the pytest checks ``names`` from the copy ``tree`` in one pytest process (one collection), each judged
    from the junit report."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED" and not k.startswith("ZEUS_")}
    env["PYTHONPATH"] = str(tree)
    nodes = [CHECKS[n] for n in names]
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0"]
    argv += ["-o", "addopts=", "-o", "junit_family=xunit1", f"--junitxml={report}", *nodes]
    t0 = time.monotonic()
    timeout = DEFAULT_TIMEOUT * len(nodes) ** 0.5
    try:
        subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        took = time.monotonic() - t0
        return [Result(n, BROKE, took, f"ran past {timeout:.0f} s (a timeout is not an assertion)") for n in names]
    took = time.monotonic() - t0
    if not report.exists():
        return [Result(n, BROKE, took, "no junit report: pytest did not run") for n in names]
    verdicts = junit_verdicts(report, nodes)
    return [Result(n, *verdicts[CHECKS[n]][:1], took, verdicts[CHECKS[n]][1]) for n in names]


def run_job_life(tree: Path) -> Result:
    """job_life's short form from the copy ``tree``: caught only by a violated invariant (a ``✗`` line), not by a
    crash."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED" and not k.startswith("ZEUS_")}
    env["PYTHONPATH"] = str(tree)
    argv = [sys.executable, str(tree / "scripts" / "job_life.py"), "--short", "-q"]
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            argv, cwd=tree, env=env, capture_output=True, text=True, timeout=CHECK_TIMEOUT["job_life"]
        )
    except subprocess.TimeoutExpired:
        return Result("job_life", BROKE, time.monotonic() - t0, "ran past its limit (not an assertion)")
    took, out = time.monotonic() - t0, done.stdout + done.stderr
    violations = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("✗")]
    if done.returncode == 0:
        return Result("job_life", PASSED, took, "")
    if violations:
        return Result("job_life", ASSERTION, took, violations[0][:150])
    return Result("job_life", BROKE, took, "failed without a violated invariant: " + _first(out.strip()[-300:]))


def run_checks(names: Sequence[str], tree: Path, label: str) -> list[Result]:
    tests = [n for n in names if CHECKS[n] != "job_life"]
    results = run_pytest(tests, tree, tree.parent / f"{label}.junit.xml") if tests else []
    if len(tests) < len(names):
        results.append(run_job_life(tree))
    return results


def try_plant(plant: Plant | None, checks: Sequence[str], base: Path, work: Path) -> list[Result]:
    """Link a tree to the shared copy ``base``, plant ``plant`` (None: the baseline), run ``checks`` there."""
    label = plant.key if plant else "baseline"
    tree = link_tree(base, work / label)
    if plant is not None:
        try:
            apply(plant, tree)
        except AnchorError as exc:
            return [Result(c, BROKE, 0.0, str(exc)) for c in checks]
    return run_checks(checks, tree, label)


def compile_tree(tree: Path) -> None:
    """Compile the shared copy's modules once, so that every plant's tree links to them rather than each
    compiling its own (a planted module is compiled again: its source differs)."""
    import compileall

    for top in ("zeus_run", "tests", "scripts"):
        if (tree / top).is_dir():
            compileall.compile_dir(tree / top, quiet=1, workers=1)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="Door tests only (no job_life): the form scripts/test_heavy.sh runs."
    )
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
    stale = [p for p in plants if (REPO / p.path).read_text(encoding="utf-8").count(p.anchor) != 1]
    for p in stale:  # every anchor first, in the tree itself: a stale one is named before anything runs
        print(
            f"check_the_checks: {p.key}: plant did not apply: its anchor is not in {p.path} exactly once: "
            "re-anchor it (PLANTS)"
        )
    if stale:
        return 1
    used = sorted({c for p in plants for c in p.checks(args.quick)})
    form = "quick (door tests)" if args.quick else "full (door tests and job_life --short)"
    print(f"check_the_checks: {len(plants)} plant(s), {form}, {len(used)} check(s); work directory {work}", flush=True)
    t0 = time.monotonic()
    if (REPO.parent / "shared").is_dir():  # ../shared (the traces) beside every tree, as beside the checkout
        (work / "shared").symlink_to(REPO.parent / "shared")
    base = copy_tree(REPO, work / "tree")  # the one copy; each plant's tree links to it
    compile_tree(base)
    with concurrent.futures.ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        base_f = pool.submit(try_plant, None, used, base, work)
        futures = {p.key: pool.submit(try_plant, p, p.checks(args.quick), base, work) for p in plants}
        baseline = base_f.result()
        results = {k: f.result() for k, f in futures.items()}
    ok = True
    print(f"\n{'check':<26}unplanted")
    for r in baseline:
        print(f"{r.check:<26}{'passes' if r.passed else 'FAILS'} ({r.seconds:.0f} s)")
        if not r.passed:
            ok = False
            print(f"    {r.verdict}: {r.how}")
    print(f"\n{'plant':<32}{'caught by':<26}how")
    for p in plants:
        caught = [r for r in results[p.key] if r.verdict == ASSERTION]
        ok = ok and bool(caught)
        if caught:
            for i, r in enumerate(caught):
                print(f"{p.key if i == 0 else '':<32}{r.check:<26}{r.how}")
        else:
            print(f"{p.key:<32}{'NOTHING':<26}{p.bug}")
        for r in results[p.key]:
            if r.verdict != ASSERTION:
                print(f"{'':<32}{'(' + r.check + ')':<26}{'passed' if r.passed else r.how}")
        if p.note:
            print(f"{'':<32}({p.note})")
    verdict = (
        "every planted bug caught by an assertion"
        if ok
        else "a planted bug was caught by no assertion, or a check fails unplanted"
    )
    print(f"\ncheck_the_checks: {'PASS' if ok else 'FAIL'}: {verdict} ({time.monotonic() - t0:.0f} s)")
    if args.keep:
        print(f"kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
