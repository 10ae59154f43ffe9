"""Class 3 of the hardening issue: the run directory and its files.

Damaged histories and specs give a clear error with exit code 2, a lock that
cannot be deleted from under its holder, and writes that fail (disk full,
file too large, immutable file) name the file, keep every record, and leave
the run resumable.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_run_cli import history
from tests.cli.test_run_cli import zeus_in as zeus
from tests.launcher.test_faults import launch, spec_text, wait_for
from tests.rundir.test_history import rec
from zeus_run import _fs
from zeus_run.door.opening import choose_run_dir
from zeus_run.errors import BUSY_EXIT_CODE, HistoryError, RunDirError
from zeus_run.rundir.history import HistoryStore, read_history
from zeus_run.rundir.store import RunDir, atomic_write
from zeus_run.spec import load_spec


def ran(spec: Path, *args: str) -> subprocess.CompletedProcess:
    r = zeus("run", str(spec), "--no-output", *args)
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    return r


def two_recurrences(write_spec, extra: str = "") -> Path:
    spec = write_spec(spec_text(body="recurrences: 2\n" + extra).replace("recurrences: 1\n", ""))
    r = ran(spec)
    assert r.returncode == 0, r.stderr
    return spec


def runs(spec: Path) -> Path:
    return spec.parent / "runs"


# -- a damaged history ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "garbage",
    ["[1,2]", "null", "42", '"text"', "{}", "RECURRENCE_AS_STRING", "BATCH_SIZE_AS_BOOL", "COST_AS_1E999"],
)
@pytest.mark.parametrize("where", ["middle", "last"])
def test_valid_json_that_is_not_a_record_is_an_error_with_its_line(write_spec, garbage, where):
    spec = two_recurrences(write_spec)
    path = runs(spec) / "history.jsonl"
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    bad = {
        "RECURRENCE_AS_STRING": json.dumps({**first, "recurrence": "1"}),
        "BATCH_SIZE_AS_BOOL": json.dumps({**first, "batch_size": True}),
        "COST_AS_1E999": json.dumps(first).replace(f'"cost": {json.dumps(first["cost"])}', '"cost": 1e999'),
    }.get(garbage, garbage)
    lines.insert(1 if where == "middle" else len(lines), bad)
    path.write_text("\n".join(lines) + "\n")
    line = 2 if where == "middle" else len(lines)
    for cmd in (
        ("history", str(runs(spec))),
        ("run", str(spec), "--no-output", "-n", "3"),
        ("replay", str(runs(spec))),
    ):
        r = zeus(*cmd)
        assert r.returncode == 2, (cmd, r.stderr)
        assert f"line {line} is not a valid trial record" in r.stderr, r.stderr
        assert "internal error" not in r.stderr
    assert path.read_text().splitlines()[line - 1] == bad  # nothing was cut or rewritten


def three_recurrences(write_spec, extra: str = "") -> Path:
    """A job with no end (``recurrences: null``), 3 recurrences run."""
    spec = write_spec(spec_text(body="recurrences: null\n" + extra).replace("recurrences: 1\n", ""))
    r = ran(spec, "--next", "3")
    assert r.returncode == 0, r.stderr
    return spec


@pytest.mark.parametrize("damage", ["duplicated", "swapped"])
def test_a_duplicated_or_swapped_line_is_refused_by_every_door_that_appends(write_spec, damage):
    """A line copied twice, or two lines swapped by hand: `run` used to append after it while `replay` rejected
    the directory from then on. Every door refuses it, naming the line and how to mend it, and appends nothing."""
    spec = three_recurrences(write_spec)
    path = runs(spec) / "history.jsonl"
    lines = path.read_text().splitlines()
    assert len(lines) >= 3
    if damage == "duplicated":
        lines.append(lines[1])
        line, mend = len(lines), "delete the repeated line"
    else:
        lines[1], lines[2] = lines[2], lines[1]
        line, mend = 3, "put the lines back in the order zeus-run appended them"
    path.write_text("\n".join(lines) + "\n")
    damaged = path.read_bytes()
    for cmd in (
        ("run", str(spec), "--no-output", "--next"),
        ("ask", str(spec)),
        ("ask", str(runs(spec))),
        ("replay", str(runs(spec))),
    ):
        r = zeus(*cmd)
        assert r.returncode == 2, (cmd, r.stderr)
        assert f"line {line} is out of place" in r.stderr and mend in r.stderr, (cmd, r.stderr)
        assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    assert path.read_bytes() == damaged  # nothing appended, cut or rewritten
    assert not (runs(spec) / "running.json").exists()

    # Mended as the message says, the job goes on.
    if damage == "duplicated":
        lines.pop()
    else:
        lines[1], lines[2] = lines[2], lines[1]
    path.write_text("\n".join(lines) + "\n")
    assert zeus("replay", str(runs(spec))).returncode == 0
    r = ran(spec, "--next")
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["trial"] for x in path.read_text().splitlines()] == list(range(len(lines) + 1))


def test_a_line_copied_while_a_server_keeps_the_job_folded_is_refused_at_its_next_ask(write_spec):
    """The server (and a Job in one process) keep the history folded and read only what was appended: the
    appended copy is checked against what was folded."""
    from zeus_run.asktell import ask

    spec = three_recurrences(write_spec, "concurrency: 2\n")
    path = runs(spec) / "history.jsonl"
    assert ask(runs(spec)).token  # folds the history, and keeps the fold
    lines = path.read_text().splitlines()
    with open(path, "a") as f:
        f.write(lines[0] + "\n")
    first = json.loads(lines[0])["trial"]  # trials end in any order with concurrency 2
    with pytest.raises(
        HistoryError, match=rf"line {len(lines) + 1} is out of place \(it repeats trial #{first} of line 1"
    ):
        ask(runs(spec))


def test_records_of_concurrent_runs_in_end_order_are_in_place():
    """Trials end in any order with ``concurrency``; each record says what its decision had seen."""
    from zeus_run.rundir.history import parse_history

    def line(trial: int, seen: int | None) -> bytes:
        return json.dumps(rec(trial, seen=seen).to_json()).encode() + b"\n"

    ok = line(0, 0) + line(2, 0) + line(1, 0) + line(3, 2) + line(4, None)
    assert [r.trial for r in parse_history(ok)] == [0, 2, 1, 3, 4]
    with pytest.raises(HistoryError, match="line 3 is out of place"):
        parse_history(line(0, 0) + line(1, 1) + line(2, 3))  # saw 3 records: only 2 come before it
    with pytest.raises(HistoryError, match=r"line 3 is out of place \(trial #1 comes after trial #2 of line 2"):
        parse_history(line(0, None) + line(2, None) + line(1, None))


def test_last_record_without_newline_is_completed_before_appending(write_spec):
    spec = two_recurrences(write_spec)
    path = runs(spec) / "history.jsonl"
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    before = path.read_text().splitlines()
    r = ran(spec, "-n", "3")
    assert r.returncode == 0, r.stderr
    after = path.read_text().splitlines()
    assert after[: len(before)] == before and len(after) > len(before)
    assert [json.loads(x)["trial"] for x in after] == list(range(len(after)))
    assert not (runs(spec) / "history.jsonl.torn").exists()


def test_append_never_glues_onto_a_record_without_newline(tmp_path):
    store = HistoryStore(tmp_path / "history.jsonl")
    store.append(rec(0))
    store.path.write_bytes(store.path.read_bytes().rstrip(b"\n"))
    store.append(rec(1))
    assert [r.trial for r in read_history(store.path)] == [0, 1]


# -- a damaged or missing spec.yaml --------------------------------------------------------------


@pytest.mark.parametrize("content", ["- a\n- list\n", "", "just a string\n", "a: [unclosed\n", "x: &a [*a]\n"])
def test_damaged_stored_spec_is_refused_naming_the_file(write_spec, content):
    spec = two_recurrences(write_spec)
    (runs(spec) / "spec.yaml").write_text(content)
    r = ran(spec, "-n", "3")
    assert r.returncode == 2, r.stderr
    assert "spec.yaml" in r.stderr and "move it aside" in r.stderr
    # --force starts a fresh run next to it instead.
    r = ran(spec, "-n", "3", "--force")
    assert r.returncode == 0, r.stderr
    assert (spec.parent / "runs-2" / "history.jsonl").exists()


def test_deleted_spec_with_the_same_settings_resumes_and_is_saved_again(write_spec):
    spec = two_recurrences(write_spec)
    (runs(spec) / "spec.yaml").unlink()
    before = history(spec)
    r = ran(spec, "-n", "3")
    assert r.returncode == 0, r.stderr
    assert "spec.yaml is missing" in r.stderr and "agree with this spec" in r.stderr
    assert history(spec)[: len(before)] == before and len(history(spec)) > len(before)
    assert (runs(spec) / "spec.yaml").exists()


@pytest.mark.parametrize(
    "change",
    [
        # the old internal error (zeus: a horizon of 2 leaves zeus-voi nothing worth exploring)
        ("batch_sizes: [1, 2, 4]", "batch_sizes: [2, 4, 8]", "optimizer:\n  policy: zeus\n"),
        ("default_batch_size: 2", "default_batch_size: 4"),  # the replayed decisions differ
        ("beta: null", "beta: 1.2", "optimizer:\n  policy: zeus\n"),  # zeus-voi never cuts its converged b0
        ("target_metric: 0.9", "target_metric: 1.5"),
        ("max_epochs: 6", "max_epochs: 1"),
        ("seed: 5", "seed: 6"),
    ],
)
def test_deleted_spec_with_changed_settings_is_refused(write_spec, change):
    old, new, *extra = change
    spec = two_recurrences(write_spec, "seed: 5\n" + "".join(extra))
    (runs(spec) / "spec.yaml").unlink()
    assert old in spec.read_text()
    spec.write_text(spec.read_text().replace(old, new))
    before = (runs(spec) / "history.jsonl").read_bytes()
    r = ran(spec, "-n", "3")
    assert r.returncode == 2, r.stderr
    assert "spec.yaml is missing, and the history does not follow from this spec" in r.stderr
    assert (runs(spec) / "history.jsonl").read_bytes() == before


def test_deleted_spec_with_changed_eta_is_refused_when_costs_show_it(tmp_path):
    from zeus_run.cost import zeus_cost

    f = tmp_path / "job.yaml"
    f.write_text(spec_text(body="eta: 0.5\n").replace("run_dir: runs", f"run_dir: {tmp_path / 'runs'}"))
    spec = load_spec(f)
    store = HistoryStore(tmp_path / "runs" / "history.jsonl")
    store.path.parent.mkdir()
    store.append(
        rec(0, batch_size=2, job="f", time=10.0, energy=300.0, max_power=100.0, cost=zeus_cost(300.0, 10.0, 0.5, 100.0))
    )
    assert choose_run_dir(spec, None, False, False) == (store.path.parent, True)
    with pytest.raises(RunDirError, match=r"eta=0\.8"):
        choose_run_dir(spec.with_overrides(eta=0.8), None, False, False)


# -- --force is idempotent (issue 12) ------------------------------------------------------------


def test_force_resumes_the_directory_it_started_on_the_next_call(write_spec):
    spec = two_recurrences(write_spec)
    spec.write_text(spec.read_text().replace("beta: null", "beta: 3.0"))
    for n in (2, 3, 4):
        r = ran(spec, "--force", "-n", str(n))
        assert r.returncode == 0, r.stderr
    siblings = sorted(p.name for p in spec.parent.iterdir() if p.name.startswith("runs"))
    assert siblings == ["runs", "runs-2"]
    recs = [json.loads(x) for x in (spec.parent / "runs-2" / "history.jsonl").read_text().splitlines()]
    assert sum(r["reached"] for r in recs) == 4


# -- the lock ---------------------------------------------------------------------------------


def test_deleting_the_lock_file_does_not_let_a_second_launcher_in(tmp_path):
    with RunDir.open(tmp_path / "run"):
        os.remove(tmp_path / "run" / ".lock")
        with pytest.raises(RunDirError, match="in use by another zeus-run launcher"):
            RunDir.open(tmp_path / "run")
    with RunDir.open(tmp_path / "run"):  # released on close
        pass


def test_second_launcher_is_refused_after_the_lock_file_is_deleted(write_spec):
    spec = write_spec(spec_text("--epoch-time 3"))
    proc = launch(spec)
    try:
        wait_for(lambda: (runs(spec) / "running.json").exists())
        os.remove(runs(spec) / ".lock")
        r = ran(spec)
        assert r.returncode == BUSY_EXIT_CODE and "in use by another zeus-run launcher" in r.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    recs = history(spec)
    assert [(x["recurrence"], x["attempt"]) for x in recs] == [(1, 1)]


HOLDER = """
import os, sys, time
from zeus_run.rundir.store import RunDir
rd = RunDir.open(sys.argv[1])
if os.fork() == 0:  # a child forked just before the kill: it shares the locked directory until it lets go
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.01)
    os._exit(0)
print("ready", flush=True)
time.sleep(600)
"""


def test_a_killed_launchers_lock_still_held_by_its_child_is_waited_for(tmp_path, monkeypatch):
    run, release = tmp_path / "run", tmp_path / "release"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run), str(release)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    finally:
        proc.kill()  # kill -9 of the launcher; its child lives on with the lock
        proc.wait()
    from zeus_run.rundir import lock

    seen = lock._holder_dead

    def dead(words: list[str]) -> bool:
        release.touch()  # the child lets go only once the resume was refused at least once
        return seen(words)

    monkeypatch.setattr(lock, "_holder_dead", dead)
    try:
        with RunDir.open(run):  # the resume waits for the dead launcher's child rather than being refused
            pass
    finally:
        release.touch()  # the child ends whatever happened


# -- writes that fail ---------------------------------------------------------------------------


def test_file_size_limit_at_the_history_append(write_spec):
    spec = two_recurrences(write_spec)
    path = runs(spec) / "history.jsonl"
    before = path.read_bytes()
    limit = len(before) + 200  # room for running.json and the trial's small files, not for a record

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    r = subprocess.run(
        [sys.executable, "-m", "zeus_run", "run", str(spec), "--no-output", "-n", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=small_files,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert r.returncode == 2, r.stderr
    assert "history.jsonl" in r.stderr and "File too large" in r.stderr and "ulimit -f" in r.stderr
    assert "internal error" not in r.stderr
    assert path.read_bytes() == before  # no partial record
    r = ran(spec, "-n", "3")
    assert r.returncode == 0, r.stderr
    recs = history(spec)
    assert recs[: len(before.splitlines())] == [json.loads(x) for x in before.splitlines()]
    assert sum(x["reached"] for x in recs) == 3
    assert zeus("replay", str(runs(spec))).returncode == 0


def test_disk_full_at_the_history_append_names_the_file_and_keeps_records(tmp_path, monkeypatch):
    store = HistoryStore(tmp_path / "history.jsonl")
    store.extend([rec(0), rec(1)])
    before = store.path.read_bytes()
    real = _fs.write_all

    def full(fd: int, data: bytes) -> None:
        real(fd, data[:10])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_fs, "write_all", full)
    with pytest.raises(HistoryError) as info:
        store.append(rec(2))
    msg = str(info.value)
    assert "history.jsonl" in msg and "No space left on device" in msg and "resume" in msg
    assert info.value.exit_code == 2
    assert store.path.read_bytes() == before


def test_disk_full_at_a_spec_write_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    target = tmp_path / "spec.yaml"
    target.write_text("old\n")

    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_fs, "write_all", full)
    with pytest.raises(RunDirError) as info:
        atomic_write(target, "new\n")
    assert "spec.yaml" in str(info.value) and "No space left on device" in str(info.value)
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


@contextlib.contextmanager
def immutable(path: Path):
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)


def test_immutable_history_is_a_clear_error_and_resumable_after(write_spec):
    spec = two_recurrences(write_spec)
    path = runs(spec) / "history.jsonl"
    before = path.read_bytes()
    with immutable(path):
        r = ran(spec, "-n", "3")
        assert r.returncode == 2, r.stderr
        assert "history.jsonl" in r.stderr and "Operation not permitted" in r.stderr
    assert path.read_bytes() == before
    r = ran(spec, "-n", "3")
    assert r.returncode == 0, r.stderr


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "3m"):
    where.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    ).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_full_tmpfs_is_a_clear_error_and_resumable_once_space_is_back(write_spec, tmp_path):
    with small_tmpfs(tmp_path / "small") as small:
        spec = write_spec(
            spec_text(body="recurrences: 2\n")
            .replace("recurrences: 1\n", "")
            .replace("run_dir: runs", f"run_dir: {small}/run")
        )
        r = ran(spec, "-n", "1")
        assert r.returncode == 0, r.stderr
        before = (small / "run" / "history.jsonl").read_bytes()
        filler = small / "filler"
        with open(filler, "wb") as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        r = ran(spec)
        assert r.returncode == 2, r.stderr
        assert str(small / "run") in r.stderr and ("No space left" in r.stderr or "bytes free" in r.stderr)
        assert (small / "run" / "history.jsonl").read_bytes() == before
        filler.unlink()
        r = ran(spec)
        assert r.returncode == 0, r.stderr
        assert len(read_history(small / "run")) > len(before.splitlines())


@pytest.mark.parametrize(
    "edit",
    [
        ("batch_sizes:\n- 1\n- 2\n- 4", "batch_sizes:\n- a\n- b"),
        ("default_batch_size: 2", "default_batch_size: 3"),
        ("eta: 0.5", "eta: 7"),
        ("policy: zeus", "policy: nope"),
    ],
)
def test_replay_of_an_edited_spec_is_a_clear_error(write_spec, edit):
    spec = two_recurrences(write_spec)
    path = runs(spec) / "spec.yaml"
    old, new = edit
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    r = zeus("replay", str(runs(spec)))
    assert r.returncode == 2, r.stderr
    assert "spec.yaml" in r.stderr and "internal error" not in r.stderr


@pytest.mark.parametrize("size", [0, 10, 4095, 4096, 4097, 20_000])
def test_read_at_most_reads_what_a_bounded_read_does(tmp_path, size):
    path = tmp_path / "f"
    data = bytes(i % 251 for i in range(size))
    path.write_bytes(data)
    for limit in (1, 100, 4096, 5000, 1 << 20):
        with open(path, "rb") as f:
            assert _fs.read_at_most(f, limit) == data[:limit]


def test_read_at_most_reads_past_the_size_it_saw_when_the_file_grows(tmp_path, monkeypatch):
    path = tmp_path / "f"
    path.write_bytes(b"a" * 10)
    real = os.fstat
    monkeypatch.setattr(os, "fstat", lambda fd: os.stat_result((*real(fd)[:6], 0, *real(fd)[7:])))  # sees size 0
    path.write_bytes(b"b" * 10_000)
    with open(path, "rb") as f:
        assert _fs.read_at_most(f, 1 << 20) == b"b" * 10_000
        f.seek(0)
        assert _fs.read_at_most(f, 6000) == b"b" * 6000


def test_the_lock_names_its_last_holder_only(tmp_path):
    """``.lock`` is written over in place at one width (no truncation per ask and tell): what an earlier
    holder or an older zeus-run wrote, longer or shorter, never shows through."""
    from zeus_run.rundir.lock import LOCK_NAME, _holder_words, _write_holder, launcher_holds

    lock = tmp_path / LOCK_NAME
    for earlier in (b"123 " + b"h" * 300 + b" 2026-01-01T00:00:00+00:00 run\n", b"1 h t\n", b""):
        lock.write_bytes(earlier)
        for role in ("ask", "run", "tell"):
            os.close(_write_holder(tmp_path, role))
            words = _holder_words(tmp_path)
            assert words[0] == str(os.getpid()) and words[3:] == [role], words
            assert launcher_holds(tmp_path) is (role == "run")
        assert lock.read_bytes().rstrip().endswith(b" tell") and len(lock.read_bytes()) == 128
