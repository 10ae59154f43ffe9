#!/usr/bin/env python3
"""A fake Slurm for tests without a cluster: sbatch, squeue and scancel over a state directory.

Installed by `install` as three commands on PATH (links to this file); state lives in
``$FAKE_SLURM_DIR``: ``jobs/<id>.json`` per job, ``calls.log`` (one line per command
run, with its arguments). sbatch runs each job's script at once, in a process group
of its own, under a monitor that records how it ended (``COMPLETED``/``FAILED``),
unless ``$FAKE_SLURM_MODE`` says otherwise:

* ``run`` (default): as above; the job is ``RUNNING`` on node ``fake1``.
* ``ghost``: the job reads ``RUNNING`` but its script never runs (a node that
  cannot see the run directory, as the launcher sees it).
* ``fail``: the script never runs; the job ends ``FAILED`` at once with a line in
  its output, like a node without the Python environment.
* ``timeout:S``: the job is ended after S seconds as Slurm ends one over its time
  limit: SIGTERM, then SIGKILL after `KILL_WAIT`, state ``TIMEOUT``.

scancel without ``--signal`` cancels like Slurm: SIGCONT and SIGTERM to the job's
processes (its process group and every process carrying its ``SLURM_JOB_ID``),
SIGKILL after `KILL_WAIT`, state ``CANCELLED``. ``--signal=SIG --batch`` signals the
batch script's own process only.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

KILL_WAIT = 2.0
NODE = "fake1"


def state_dir() -> Path:
    return Path(os.environ["FAKE_SLURM_DIR"])


def install(bin_dir: Path, state: Path) -> None:
    """Make ``sbatch``, ``squeue`` and ``scancel`` in ``bin_dir`` run this fake with ``state``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (state / "jobs").mkdir(parents=True, exist_ok=True)
    for name in ("sbatch", "squeue", "scancel"):
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} {name} "$@"\n')
        path.chmod(0o755)


def jobs() -> dict[str, dict]:
    out = {}
    for p in sorted((state_dir() / "jobs").glob("*.json"), key=lambda p: int(p.stem)):
        with contextlib.suppress(OSError, ValueError):
            out[p.stem] = json.loads(p.read_text())
    return out


@contextlib.contextmanager
def locked():
    with open(state_dir() / "lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def update(job_id: str, **changes: object) -> dict:
    path = state_dir() / "jobs" / f"{job_id}.json"
    with locked():
        job = json.loads(path.read_text())
        if changes.pop("_if_live", False) and job["state"] not in ("PENDING", "RUNNING"):
            return job
        job.update(changes)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(job))
        os.replace(tmp, path)
    return job


def now() -> str:
    return dt.datetime.now().replace(microsecond=0).isoformat()


def log_call(argv: list[str]) -> None:
    with open(state_dir() / "calls.log", "a") as f:
        f.write(" ".join(argv) + "\n")


def sbatch(args: list[str]) -> int:
    opts = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
    script = sys.stdin.read()
    with locked():
        counter = state_dir() / "next_id"
        job_id = str(int(counter.read_text()) if counter.exists() else 100)
        counter.write_text(str(int(job_id) + 1))
    mode = os.environ.get("FAKE_SLURM_MODE", "run")
    script_path = state_dir() / "jobs" / f"{job_id}.sh"
    script_path.write_text(script)
    job = {
        "id": job_id,
        "name": opts.get("job-name", "sbatch"),
        "output": opts.get("output", f"slurm-{job_id}.out"),
        "chdir": opts.get("chdir", os.getcwd()),
        "state": "RUNNING",
        "reason": "None",
        "exit": 0,
        "submit": now(),
        "start": now(),
        "end": "N/A",
        "pid": None,
        "mode": mode,
    }
    (state_dir() / "jobs" / f"{job_id}.json").write_text(json.dumps(job))
    if mode == "fail":
        with open(job["output"], "a") as f:
            f.write("/nowhere/python: No such file or directory\n")
        update(job_id, state="FAILED", exit=127 << 8, end=now())
    elif mode != "ghost":
        subprocess.Popen(
            [sys.executable, __file__, "_monitor", job_id],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    print(job_id)
    return 0


def monitor(job_id: str) -> int:
    """Run a job's script and record how it ended (the job's own process group, so scancel can reach it)."""
    job = jobs()[job_id]
    env = {**os.environ, "SLURM_JOB_ID": job_id, "SLURM_JOB_NAME": job["name"], "SLURMD_NODENAME": NODE}
    env.pop("FAKE_SLURM_MODE", None)
    with open(job["output"], "ab") as out:
        proc = subprocess.Popen(
            ["/bin/sh", str(state_dir() / "jobs" / f"{job_id}.sh")],
            cwd=job["chdir"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    update(job_id, pid=proc.pid)
    mode = job["mode"]
    if mode.startswith("timeout:"):
        try:
            proc.wait(timeout=float(mode.split(":", 1)[1]))
        except subprocess.TimeoutExpired:
            update(job_id, state="TIMEOUT", reason="TimeLimit", end=now(), _if_live=True)
            end_job(job_id, proc.pid)
    status = proc.wait()
    exit_status = (status << 8) if status >= 0 else -status
    update(job_id, state="COMPLETED" if status == 0 else "FAILED", exit=exit_status, end=now(), _if_live=True)
    return 0


def job_pids(job_id: str, pid: int | None) -> set[int]:
    """The job's processes: its process group and whatever carries its SLURM_JOB_ID (as proctrack would)."""
    pids: set[int] = set()
    # NOTE: job ids start at 100 in every fake; other test sessions on the host have a job 100
    # too, so a process is this job's only if it also carries this fake's state directory.
    marker = {f"SLURM_JOB_ID={job_id}".encode(), f"FAKE_SLURM_DIR={state_dir()}".encode()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if marker <= set((entry / "environ").read_bytes().split(b"\0")):
                pids.add(int(entry.name))
    if pid:
        with contextlib.suppress(OSError):
            pgid = os.getpgid(pid)
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    with contextlib.suppress(OSError):
                        if os.getpgid(int(entry.name)) == pgid:
                            pids.add(int(entry.name))
    return pids


def end_job(job_id: str, pid: int | None) -> None:
    """SIGCONT + SIGTERM to every process of the job, SIGKILL to those left after KILL_WAIT."""
    pids = job_pids(job_id, pid)
    for sig in (signal.SIGCONT, signal.SIGTERM):
        for p in pids:
            with contextlib.suppress(OSError):
                os.kill(p, sig)
    deadline = time.monotonic() + KILL_WAIT
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    for p in job_pids(job_id, pid) | pids:
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def scancel(args: list[str]) -> int:
    sig = next((a.split("=", 1)[1] for a in args if a.startswith("--signal=")), None)
    ids = [a for a in args if a.isdigit()]
    known = jobs()
    for job_id in ids:
        job = known.get(job_id)
        if job is None or job["state"] not in ("PENDING", "RUNNING"):
            continue
        if sig is not None:
            if job.get("pid"):
                with contextlib.suppress(OSError):
                    os.kill(job["pid"], getattr(signal, f"SIG{sig}"))
            continue
        update(job_id, state="CANCELLED", reason="None", exit=15, end=now(), _if_live=True)
        if job["mode"] == "ghost":
            continue
        pid = job.get("pid")
        if os.fork() == 0:  # like slurmctld: scancel returns at once, the job's end follows
            os.setsid()
            end_job(job_id, pid)
            os._exit(0)
    return 0


def squeue(args: list[str]) -> int:
    opts = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
    known = jobs()
    wanted = opts["jobs"].split(",") if "jobs" in opts else None
    names = opts["name"].split(",") if "name" in opts else None
    if wanted is not None and not any(j in known for j in wanted):
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    for job_id, job in known.items():
        if wanted is not None and job_id not in wanted:
            continue
        if names is not None and job["name"] not in names:
            continue
        node = NODE if job["state"] != "PENDING" else ""
        fields = [job_id, job["state"], job["reason"], str(job["exit"]), node, node]
        print("|".join([*fields, job["submit"], job["start"], job["end"], job["name"]]))
    return 0


def main() -> int:
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "_monitor":
        return monitor(args[0])
    log_call([cmd, *args])
    return {"sbatch": sbatch, "squeue": squeue, "scancel": scancel}[cmd](args)


if __name__ == "__main__":
    sys.exit(main())
