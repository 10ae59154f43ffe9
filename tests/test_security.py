"""Class 4 of the hardening issue: symbolic links, shell injection and terminal escapes.

Run directories often sit in shared places. A link planted where zeus-run
writes must never make it write, append to or truncate the link's target; a
`run_dir` holding shell syntax must never run it; and a script's terminal
escapes must never reach the user's terminal.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli.test_run_cli import zeus_in as zeus
from tests.conftest import PYTHON, SCRIPTS
from tests.launcher.test_faults import spec_text
from tests.rundir.test_history import rec
from zeus_run import _fs
from zeus_run._terminal import printable
from zeus_run.contract import TrialFiles
from zeus_run.errors import HistoryError, RunDirError
from zeus_run.rundir.history import HistoryStore
from zeus_run.rundir.store import WRITTEN_FILES, RunDir, atomic_write, check_writable

HOSTILE = str(SCRIPTS / "hostile_train.py")


@pytest.fixture
def victim(tmp_path: Path):
    """A file outside the run directory that a planted link points to; asserts it is untouched."""
    path = tmp_path / "victim.txt"
    path.write_text("precious\n")
    os.utime(path, (1_000_000, 1_000_000))
    yield path
    assert path.read_text() == "precious\n" and os.stat(path).st_mtime == 1_000_000


def no_internal_error(r) -> None:
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr


# -- links planted in the run directory ---------------------------------------------------------


@pytest.mark.parametrize(
    "name", [*WRITTEN_FILES, *(f"trials/r0001-t01/{n}" for n in TrialFiles.WRITTEN), "trials/r0001-t01", "trials"]
)
def test_run_refuses_a_run_directory_with_a_link_where_it_writes(write_spec, victim, name):
    spec = write_spec(spec_text())
    link = spec.parent / "runs" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(victim, link)
    r = zeus("run", str(spec), "--no-output")
    no_internal_error(r)
    assert r.returncode == 2, r.stderr
    assert "symbolic link" in r.stderr and name.split("/")[-1] in r.stderr


def test_a_dangling_link_is_not_created_through(write_spec, tmp_path):
    spec = write_spec(spec_text())
    target = tmp_path / "created-through-link"
    (spec.parent / "runs").mkdir()
    os.symlink(target, spec.parent / "runs" / "running.json.tmp")
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 2 and not target.exists()


def test_a_stop_file_link_planted_by_the_script_is_not_followed(write_spec, tmp_path):
    target = tmp_path / "created-by-stop"
    argv = ", ".join(f'"{a}"' for a in (PYTHON, HOSTILE, "--needs", "2:1", "--plant-stop-link", str(target)))
    spec = write_spec(
        f"""
        name: s
        command: [{argv}]
        batch_sizes: [1, 2, 4]
        default_batch_size: 2
        target_metric: 0.9
        max_epochs: 3
        recurrences: 1
        energy: {{source: estimate, watts: 100}}
        run_dir: runs
        stop: {{grace: 1, term_grace: 1}}
        """
    )
    r = zeus("run", str(spec), "--no-output")
    no_internal_error(r)
    assert r.returncode == 0, r.stderr
    assert not target.exists()


def test_world_writable_run_directory_is_refused(tmp_path):
    run = tmp_path / "shared"
    run.mkdir()
    os.chmod(run, 0o1777)
    with pytest.raises(RunDirError, match="writable by every user"):
        RunDir.open(run)


# -- the primitives themselves, also when a link appears after the checks --------------------------


def test_history_append_and_repair_never_follow_links(tmp_path, victim):
    store = HistoryStore(tmp_path / "history.jsonl")
    os.symlink(victim, store.path)
    with pytest.raises(HistoryError, match="symbolic link"):
        store.append(rec(0))
    with pytest.raises(HistoryError, match="symbolic link"):
        store.repair_tail()
    os.unlink(store.path)
    store.append(rec(0))
    with open(store.path, "ab") as f:
        f.write(b'{"torn')
    os.symlink(victim, str(store.path) + ".torn")
    with pytest.raises(HistoryError, match="symbolic link"):
        store.repair_tail()


def test_atomic_write_replaces_a_planted_temporary_link(tmp_path, victim):
    os.symlink(victim, tmp_path / "spec.yaml.tmp")
    atomic_write(tmp_path / "spec.yaml", "name: x\n")
    assert (tmp_path / "spec.yaml").read_text() == "name: x\n"
    assert not (tmp_path / "spec.yaml.tmp").exists()


def test_write_probe_link_is_removed_not_followed(tmp_path, victim):
    os.symlink(victim, tmp_path / ".write-probe")
    check_writable(tmp_path)
    assert not os.path.lexists(tmp_path / ".write-probe")


def test_trial_directory_link_is_refused(tmp_path, victim):
    with RunDir.open(tmp_path / "run") as rd:
        os.symlink(tmp_path, tmp_path / "run" / "trials" / "r0002-t01")
        with pytest.raises(RunDirError, match="symbolic link"):
            rd.trial_dir(2, 1)
        rd.trial_dir(3, 1)
        os.symlink(victim, tmp_path / "run" / "trials" / "r0003-t01" / "output.log")
        with pytest.raises(RunDirError, match="symbolic link"):
            rd.trial_dir(3, 1)


def test_fs_primitives(tmp_path, victim):
    link = tmp_path / "link"
    os.symlink(victim, link)
    for open_ in (_fs.open_append, _fs.open_update, _fs.open_read):
        with pytest.raises(_fs.UnsafePathError, match="symbolic link"):
            open_(link)
    assert _fs.touch(link) is False
    with pytest.raises(_fs.UnsafePathError):
        _fs.make_dir(link)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for open_ in (_fs.open_append, _fs.open_read):  # refused at once, not blocked on a reader or writer
        with pytest.raises(_fs.UnsafePathError, match=r"FIFO|regular file"):
            open_(fifo)
    assert _fs.unsafe_entry(link) is not None and _fs.unsafe_entry(fifo) is not None
    assert _fs.unsafe_entry(tmp_path / "missing") is None and _fs.unsafe_entry(victim) is None


# -- shell: true --------------------------------------------------------------------------------


def test_shell_command_quotes_every_substituted_value(write_spec, tmp_path):
    fake = SCRIPTS / "fake_train.py"
    run_dir = tmp_path / "runs $(touch pwned-run-dir) `touch pwned-backtick` ; touch pwned-semicolon"
    spec = write_spec(
        f"""
        name: sh
        shell: true
        command: "echo {{log_dir}} > {{log_dir}}/seen && {PYTHON} {fake} --batch-size {{batch_size}} --needs 1:0,2:2,4:3"
        batch_sizes: [1, 2, 4]
        default_batch_size: 2
        target_metric: 0.9
        max_epochs: 3
        recurrences: 1
        energy: {{source: estimate, watts: 100}}
        run_dir: "{run_dir}"
        """
    )
    r = zeus("run", str(spec), "--no-output")
    no_internal_error(r)
    assert r.returncode == 0, r.stderr
    assert not any(p.name.startswith("pwned") for p in tmp_path.rglob("*"))
    (seen,) = run_dir.glob("trials/*/seen")
    assert seen.read_text().strip() == str(seen.parent)


ARGS_SCRIPT = """
import json, os, sys
want = os.environ["ZEUS_LOG_DIR"]
ok = sys.argv[1:] == [want, want, want + "/m.jsonl", "--out=" + want]
print(json.dumps(sys.argv[1:]))
print("val_acc=" + ("1.0" if ok else "0.0"), flush=True)
"""


def test_shell_true_with_a_space_in_the_run_dir_passes_log_dir_whole_bare_or_quoted(write_spec, tmp_path):
    """The docs advised ``'{log_dir}'``; with a space in the run directory's path it reached the script as 3
    arguments. Bare or quoted, it is one argument now."""
    script = tmp_path / "args.py"
    script.write_text(ARGS_SCRIPT)
    run_dir = tmp_path / "my runs" / "it's here"
    spec = write_spec(
        f"""
        name: sh
        shell: true
        command: "{PYTHON} {script} {{log_dir}} '{{log_dir}}' \\"{{log_dir}}/m.jsonl\\" --out='{{log_dir}}'"
        batch_sizes: [1, 2]
        default_batch_size: 2
        target_metric: 0.9
        max_epochs: 1
        recurrences: 1
        metric: {{regex: 'val_acc=([0-9.]+)'}}
        energy: {{source: estimate, watts: 100}}
        run_dir: "{run_dir}"
        """
    )
    r = zeus("run", str(spec), "--no-output")
    no_internal_error(r)
    assert r.returncode == 0, r.stderr
    (line,) = (run_dir / "history.jsonl").read_text().splitlines()
    rec = json.loads(line)
    assert rec["reached"] is True, (run_dir / rec["log"]).read_text()


# -- terminal escapes ---------------------------------------------------------------------------


def hostile_spec(write_spec, *args: str) -> Path:
    argv = ", ".join(f'"{a}"' for a in (PYTHON, HOSTILE, "--needs", "1:2,2:2,4:2", *args))
    return write_spec(
        f"""
        name: e
        command: [{argv}]
        batch_sizes: [1, 2, 4]
        default_batch_size: 2
        target_metric: 0.9
        max_epochs: 3
        recurrences: 1
        energy: {{source: estimate, watts: 100}}
        run_dir: runs
        """
    )


def test_script_output_escapes_never_reach_the_terminal(write_spec):
    spec = hostile_spec(write_spec, "--print-escapes")
    r = zeus("run", str(spec))  # the output is echoed
    no_internal_error(r)
    assert r.returncode == 0, r.stderr
    assert "red epoch 1" in r.stderr
    assert "\x1b" not in r.stderr + r.stdout and "\x07" not in r.stderr + r.stdout
    log = next((spec.parent / "runs" / "trials").glob("*/output.log")).read_bytes()
    assert b"\x1b[2J" in log  # the log keeps what the script wrote


def test_crash_message_escapes_never_reach_the_terminal(write_spec):
    spec = hostile_spec(write_spec, "--crash-with-escapes")
    r = zeus("run", str(spec))
    no_internal_error(r)
    assert r.returncode == 1 and "boom" in r.stderr
    assert "\x1b" not in r.stderr + r.stdout and "\x07" not in r.stderr + r.stdout


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("\x1b[2J\x1b[Hplain", "plain"),
        ("\x1b]0;title\x07text", "text"),
        ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),
        ("\x1bPdevice\x1b\\ok", "ok"),
        ("\x9b2Jc1", "2Jc1"),
        ("bell\x07 back\x08 del\x7f", "bell^G back^H del^?"),
        (" 10%|#  |\r 50%|### |\r", " 50%|### |"),
        ("right\u202eleft", "rightleft"),
        ("tab\tkept", "tab\tkept"),
        ("dangling\x1b", "dangling"),
        ("line\nbreak", "line break"),
    ],
)
def test_printable(raw, shown):
    assert printable(raw) == shown


def test_printable_keeps_newlines_when_asked():
    assert printable("a\x1b[1m\nb\x07\n", keep_newlines=True) == "a\nb^G\n"
