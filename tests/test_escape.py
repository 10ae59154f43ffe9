"""Processes that escape or hang the launcher, hostile regexes, full disks: the launcher holds, nothing is left running."""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.cli.test_run_cli import alive, zeus
from tests.conftest import PYTHON
from zeus_run.trial.proctree import new_token

REPO = Path(__file__).resolve().parents[1]


def job(tmp_path: Path, script: str, body: str = "") -> Path:
    """A one-recurrence job running ``script`` (its source), in regex mode unless ``body`` says otherwise."""
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(script))
    spec = tmp_path / "job.yaml"
    spec.write_text(
        textwrap.dedent(
            f"""
            name: e
            command: ["{PYTHON}", "{path}"]
            env: {{PYTHONPATH: "{REPO}"}}
            batch_sizes: [1, 2]
            default_batch_size: 2
            target_metric: 0.9
            max_epochs: 5
            recurrences: 1
            energy: {{source: estimate, watts: 100}}
            run_dir: runs
            stop: {{grace: 2, term_grace: 0.3, kill_grace: 2}}
            """
        )
        + textwrap.dedent(body)
    )
    return spec


REGEX = "metric: {regex: 'val_acc=([0-9.]+)'}\n"


def record(spec: Path) -> dict:
    (line,) = (spec.parent / "runs" / "history.jsonl").read_text().splitlines()
    return json.loads(line)


def pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()]


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def test_daemonized_grandchild_is_killed_when_the_trial_ends(tmp_path):
    spec = job(
        tmp_path,
        f"""
        import os, sys, time
        if os.fork() == 0:          # double fork + setsid: a classic daemon
            os.setsid()
            if os.fork() == 0:
                fd = os.open(os.devnull, os.O_RDWR)
                for i in (0, 1, 2):
                    os.dup2(fd, i)
                open({str(tmp_path / "pids")!r}, "w").write(str(os.getpid()))
                time.sleep(120)
            os._exit(0)
        while not os.path.exists({str(tmp_path / "pids")!r}):
            time.sleep(0.01)
        print("val_acc=1.0", flush=True)
        """,
        REGEX,
    )
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    assert record(spec)["reached"] is True
    (daemon,) = pids(tmp_path / "pids")
    assert wait_gone(daemon), "the daemon survived its trial"


def test_a_process_that_moves_to_a_new_process_group_is_stopped(tmp_path):
    # sh runs python as a child, so python can leave the process group the launcher signals.
    spec = job(
        tmp_path,
        f"""
        import os, time
        os.setpgid(0, 0)
        open({str(tmp_path / "pids")!r}, "w").write(str(os.getpid()))
        print("val_acc=1.0", flush=True)
        while True:            # ignores the stop file
            time.sleep(0.1)
        """,
        REGEX,
    )
    script = tmp_path / "train.py"
    spec.write_text(
        spec.read_text().replace(
            f'command: ["{PYTHON}", "{script}"]', f'command: ["/bin/sh", "-c", "{PYTHON} {script}; echo done"]'
        )
    )
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    rec = record(spec)
    assert rec["reached"] is True
    (moved,) = pids(tmp_path / "pids")
    assert wait_gone(moved), "the process that left the group survived its trial"


def test_a_child_holding_the_output_open_does_not_hang_the_launcher(tmp_path):
    # The script exits without reaching the target (no stop decision), leaving a child on its stdout.
    spec = job(
        tmp_path,
        f"""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # inherits stdout
        open({str(tmp_path / "pids")!r}, "w").write(str(child.pid))
        print("val_acc=0.5", flush=True)
        """,
        REGEX,
    )
    r = zeus("run", str(spec), "--no-output", timeout=60)
    assert r.returncode == 1, r.stderr  # the default batch size did not converge: a clean error
    assert record(spec)["stop_reason"] == "exited"
    (child,) = pids(tmp_path / "pids")
    assert wait_gone(child)


def cgroups_here() -> bool:
    """Whether this process may give a trial a cgroup of its own (`zeus_run.trial._cgroup`)."""
    from zeus_run.trial._cgroup import TrialCgroup

    probe = TrialCgroup.create(new_token())
    if probe is None:
        return False
    probe.remove(1.0)
    return True


@pytest.mark.parametrize("cgroup", ["off", "auto"])
def test_an_escaped_process_holding_the_output_cannot_hang_the_launcher(tmp_path, cgroup):
    """A clean environment and a new session: nothing in /proc ties it to the trial but the pipe. Without a
    cgroup it escapes, and the launcher stops reading the output it holds; in the trial's cgroup it is killed."""
    spec = job(
        tmp_path,
        f"""
        import subprocess, time
        child = subprocess.Popen(["setsid", "env", "-i", "sleep", "120"])
        open({str(tmp_path / "pids")!r}, "w").write(str(child.pid))
        # Escaped only once it runs `sleep` (after setsid and env -i): before that it is still in the
        # trial's session, and a loaded machine may not have run it yet when this script exits.
        while open(f"/proc/{{child.pid}}/cmdline", "rb").read().split(b"\\0")[0] != b"sleep":
            time.sleep(0.01)
        print("val_acc=1.0", flush=True)
        """,
        REGEX,
    )
    try:
        r = subprocess.run(
            [sys.executable, "-m", "zeus_run", "run", str(spec), "--no-output"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "ZEUS_RUN_CGROUP": cgroup},
        )
        assert r.returncode == 0, r.stderr
        assert record(spec)["reached"] is True
        if cgroup == "auto" and cgroups_here():
            assert "stopped reading it" not in r.stderr
            assert all(wait_gone(pid) for pid in pids(tmp_path / "pids")), "the escaped process outlived its cgroup"
        else:
            assert "stopped reading it" in r.stderr
    finally:
        for pid in pids(tmp_path / "pids"):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


CATASTROPHIC = "metric: {regex: '^(?:a+)+val=([0-9.]+)'}\n"


def test_catastrophic_regex_skips_the_line_and_the_trial_goes_on(tmp_path):
    spec = job(
        tmp_path,
        """
        print("a" * 40 + "!", flush=True)   # exponential backtracking for that regex
        print("aval=0.5", flush=True)
        print("aval=1.0", flush=True)
        """,
        CATASTROPHIC,
    )
    r = zeus("run", str(spec), "--no-output", timeout=60)
    assert r.returncode == 0, r.stderr
    rec = record(spec)
    assert rec["reached"] is True and rec["metrics"] == [0.5, 1.0]
    assert "catastrophic backtracking" in r.stderr


def test_catastrophic_regex_cannot_make_the_timeout_slip(tmp_path):
    spec = job(
        tmp_path,
        """
        import time
        while True:
            print("a" * 40 + "!", flush=True)
            time.sleep(0.05)
        """,
        CATASTROPHIC + "timeout: 3\n",
    )
    r = zeus("run", str(spec), "--no-output", timeout=90)
    assert r.returncode == 1, r.stderr  # the timeout cut it: a failure of the batch size, a clean one
    rec = record(spec)
    assert rec["stop_reason"] == "timeout" and "no result within the 3 s timeout" in rec["message"]
    assert "is not matched any more" in r.stderr
    assert "internal error" not in r.stderr


def test_sighup_stops_the_trial_like_sigterm(tmp_path):
    spec = job(
        tmp_path,
        f"""
        import os, time
        open({str(tmp_path / "pids")!r}, "w").write(str(os.getpid()))
        while True:
            time.sleep(0.1)
        """,
        REGEX,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "zeus_run", "run", str(spec), "--no-output"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    end = time.monotonic() + 60
    while not (tmp_path / "pids").exists():
        assert time.monotonic() < end
        time.sleep(0.02)
    proc.send_signal(signal.SIGHUP)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 129, err
    assert "SIGHUP" in err
    rec = record(spec)
    assert rec["stop_reason"] == "interrupted"
    (script,) = pids(tmp_path / "pids")
    assert wait_gone(script)


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))


def test_output_log_that_cannot_be_written_does_not_crash_the_launcher(tmp_path):
    spec = job(
        tmp_path,
        """
        for _ in range(1000):
            print("x" * 999, flush=True)      # 1 MB: more than the 200 kB the log may grow to
        print("val_acc=1.0", flush=True)
        """,
        REGEX,
    )
    r = subprocess.run(
        [sys.executable, "-m", "zeus_run", "run", str(spec), "--no-output"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_file_size,
    )
    assert r.returncode == 0, r.stderr
    rec = record(spec)
    assert rec["reached"] is True
    assert "output.log" in rec["message"] and "File too large" in rec["message"]
    assert "output.log" in r.stderr


@pytest.mark.parametrize("mode", ["regex", "events"])
def test_script_that_deletes_its_own_log_dir(tmp_path, mode):
    if mode == "regex":
        body = 'import os, shutil\nshutil.rmtree(os.environ["ZEUS_LOG_DIR"])\nprint("val_acc=1.0", flush=True)\n'
        extra = REGEX
    else:
        body = (
            "import os, shutil\nfrom zeus_run.train import Trial\nt = Trial.from_env()\n"
            'shutil.rmtree(os.environ["ZEUS_LOG_DIR"])\nt.report(1.0)\n'
        )
        extra = ""
    spec = job(tmp_path, body, extra)
    r = zeus("run", str(spec), "--no-output")
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    rec = record(spec)
    if mode == "regex":
        assert r.returncode == 0 and rec["reached"] is True
    else:  # its event log went with the directory: the launcher never saw the epoch
        assert r.returncode == 2 and rec["stop_reason"] == "config_error"  # no metric: the spec's fault


REFORKER = """
import os, sys, time
fifo, ready, stop = {fifo!r}, {ready!r}, {stop!r}
if os.fork() == 0:  # the daemon: a new session, then a new pid every 2 ms (each generation forks, then exits)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for i in (0, 1, 2):
        os.dup2(null, i)
    held = os.open(fifo, os.O_WRONLY)  # every generation holds it: the reader sees its end once all are gone
    n = 0
    while not os.path.exists(stop):
        time.sleep(0.002)
        if os.fork() != 0:
            os._exit(0)
        n += 1
        if n == 20:
            open(ready, "w").close()
    os._exit(0)
while not os.path.exists(ready):
    time.sleep(0.01)
print("val_acc=1.0", flush=True)
"""


@pytest.mark.parametrize("cgroup", ["auto", "off"], ids=["cgroup-where-possible", "subreaper-and-sweeps"])
def test_a_daemon_that_reforks_every_2ms_does_not_outlive_its_trial(tmp_path, cgroup):
    """The sweep used to stop at the first look at /proc that found nothing, and a process that forks and exits
    every 2 ms is rarely there to be found. ``ZEUS_RUN_CGROUP=off``: without a cgroup, the launcher is the
    daemon's subreaper and reaps it generation by generation until two looks in a row find nothing."""
    fifo, ready, stop = tmp_path / "held", tmp_path / "ready", tmp_path / "stop"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # before the daemon opens it for writing
    spec = job(tmp_path, REFORKER.format(fifo=str(fifo), ready=str(ready), stop=str(stop)), REGEX)
    env = {**os.environ, "ZEUS_RUN_CGROUP": cgroup}
    try:
        r = subprocess.run(
            [sys.executable, "-m", "zeus_run", "run", str(spec), "--no-output"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert r.returncode == 0, r.stderr
        assert record(spec)["reached"] is True
        assert ready.exists()
        assert _writers_gone(reader, timeout=10.0), "the re-forking daemon outlived its trial"
    finally:
        stop.touch()  # a daemon that survived ends itself
        _writers_gone(reader, timeout=10.0)
        os.close(reader)


def _writers_gone(fd: int, timeout: float) -> bool:
    """Whether every process holding the FIFO's write end closed it (end of file) within ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], max(end - time.monotonic(), 0.0))
        if ready and os.read(fd, 4096) == b"":
            return True
    return False


def test_the_orphans_of_a_running_trial_are_reaped_as_it_goes(tmp_path):
    """The launcher is the trial's subreaper: orphans that exit are its zombies until it reaps them, and it
    reaps them while the trial runs (a script that daemonizes helpers over and over must not fill the
    process table). The script counts its launcher's zombie children and reports 1.0 once they are gone."""
    spec = job(
        tmp_path,
        """
        import os, time
        launcher = os.getppid()
        for _ in range(30):  # 30 orphans: each child forks a grandchild and exits at once
            if os.fork() == 0:
                if os.fork() == 0:
                    os._exit(0)
                os._exit(0)
            os.wait()

        def zombies():
            out = 0
            for name in os.listdir("/proc"):
                try:
                    with open(f"/proc/{name}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                out += fields[0] == "Z" and int(fields[1]) == launcher
            return out

        end = time.monotonic() + 30
        while zombies() and time.monotonic() < end:
            time.sleep(0.05)
        print("val_acc=" + ("1.0" if not zombies() else "0.0"), flush=True)
        """,
        REGEX,
    )
    r = zeus("run", str(spec), "--no-output")
    assert r.returncode == 0, r.stderr
    assert record(spec)["metrics"] == [1.0]
