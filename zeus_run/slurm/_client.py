"""Talk to Slurm through its commands: sbatch, squeue and scancel.

No ``sacct`` (clusters without accounting have none) and no JSON output (its
schema changes between Slurm releases): states come from
``squeue --states=all --Format=...``, which reads slurmctld's memory. A job that
ended more than ``MinJobAge`` seconds ago is no longer there, so `query` simply
leaves it out; whoever polls decides what that means (the trial's own outcome
file is the source of truth, Slurm's state is best effort, `UNKNOWN` when it
was never seen final).

Every function runs one command, with a time limit, and raises `SlurmError`
(or a subclass) with the command, its exit status and its stderr when the
command fails.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pwd
import re
import shlex
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from zeus_run.errors import ZeusRunError
from zeus_run.slurm._settings import SlurmSettings
from zeus_run.slurm._states import is_final

logger = logging.getLogger(__name__)

#: Seconds a Slurm command may take before `SlurmError` (slurmctld answers in
#: well under a second; a busy one can take MessageTimeout, 10 s by default).
COMMAND_TIMEOUT = 60.0

#: squeue --Format fields read into `JobInfo`, in order. ``Name`` is last so a
#: job name holding the delimiter still parses; ``:|`` means "no padding, then |".
_FIELDS = ("JobID", "State", "Reason", "exit_code", "BatchHost", "NodeList", "SubmitTime", "StartTime", "EndTime")
_FORMAT = ",".join(f"{f}:|" for f in _FIELDS) + ",Name:"
_EMPTY = ("", "N/A", "n/a", "(null)", "None", "Unknown")

#: stderr of a command that may well work when tried again.
_TRANSIENT = re.compile(
    r"Socket timed out|Unable to contact slurm controller|Connection refused|Zero Bytes were transmitted"
    r"|Resource temporarily unavailable|Transport endpoint|slurm_receive_msg|Communication connection failure",
    re.IGNORECASE,
)

#: sbatch refusals caused by the executor settings: (stderr pattern, setting, fix).
_SUBMIT_HINTS = (
    (
        re.compile(r"invalid partition", re.I),
        "executor.partition",
        "`sinfo -s` lists the partitions you may use",
    ),
    (re.compile(r"invalid account", re.I), "executor.account", "`sacctmgr show assoc user=$USER` lists your accounts"),
    (re.compile(r"invalid qos", re.I), "executor.qos", "ask your admins which QOS you may use"),
    (
        re.compile(r"invalid generic resource|requested node configuration is not available", re.I),
        "executor.gpus",
        "no node of the partition offers that many GPUs; `sinfo -o '%P %G'` shows them",
    ),
    (re.compile(r"time limit", re.I), "executor.time", "the partition allows at most `sinfo -o '%P %l'`"),
)


class SlurmError(ZeusRunError):
    """A Slurm command failed, or could not be run.

    Attributes:
        command: The argv that failed.
        stderr: Its stderr (stripped).
        transient: True when the failure looks like a controller that is busy
            or restarting, so the same command may work if tried again.
    """

    exit_code = 1

    def __init__(self, message: str, command: Sequence[str] = (), stderr: str = "", transient: bool = False) -> None:
        super().__init__(message)
        self.command = tuple(command)
        self.stderr = stderr
        self.transient = transient


class SlurmNotFoundError(SlurmError):
    """The Slurm client commands are not installed on this machine (or not on PATH)."""

    exit_code = 2


class SlurmAgentError(SlurmError):
    """A trial's agent could not run on the node, or the launcher cannot see what it writes.

    Typically the run directory is not on a filesystem the nodes share, or the
    Python environment running zeus-run is not there on the nodes.
    """

    exit_code = 2


class SlurmSubmitError(SlurmError):
    """sbatch refused the job: a setting (partition, account, qos, gpus, time) does not fit the cluster."""

    exit_code = 2


@dataclass(frozen=True)
class BatchJob:
    """One batch job to submit.

    Attributes:
        name: ``--job-name``; see `job_name` for names that identify a run and a trial.
        script: The batch script's text (see `exec_script`); sbatch reads it from stdin
            and Slurm keeps its own copy.
        output: File for the job's stdout and stderr (made absolute; its folder must
            exist on the node, i.e. sit on a filesystem the nodes share).
        chdir: Working directory of the script on the node (made absolute).
        env: Variables added to the job's environment; the rest is the caller's
            environment, which sbatch exports by default.
    """

    name: str
    script: str
    output: Path
    chdir: Path
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class JobInfo:
    """A job as slurmctld last reported it.

    Attributes:
        job_id: Slurm's job id.
        name: Job name.
        state: Job state (e.g. ``PENDING``, ``RUNNING``, ``COMPLETING``, ``COMPLETED``,
            ``TIMEOUT``; see `zeus_run.slurm.FINAL_STATES`).
        reason: Why it is in that state, as Slurm prints it: ``None``, ``Resources``, ``TimeLimit``...
        exit_status: The batch script's wait status (exit code << 8 | signal) once the job is final, else None.
        batch_host: Node that runs the batch script (the agent), once started.
        nodes: Allocated node list, once started.
        submit_time: When it was submitted, as Slurm prints it (ISO 8601, cluster local time).
        start_time: When it started (or is expected to), or None.
        end_time: When it ended (or will hit its time limit), or None.
    """

    job_id: str
    name: str
    state: str
    reason: str
    exit_status: int | None
    batch_host: str | None
    nodes: str | None
    submit_time: str | None
    start_time: str | None
    end_time: str | None

    @property
    def final(self) -> bool:
        """Whether the job has ended (`zeus_run.slurm.is_final`)."""
        return is_final(self.state)

    @property
    def exit_code(self) -> int | None:
        """The batch script's exit code, when it exited (None when unknown)."""
        return None if self.exit_status is None else (self.exit_status >> 8) & 0xFF

    @property
    def exit_signal(self) -> int | None:
        """The signal that ended the batch script, or None (0: none)."""
        return None if self.exit_status is None else self.exit_status & 0x7F


# -- commands ------------------------------------------------------------------------------


def slurm_version(timeout: float = COMMAND_TIMEOUT) -> str:
    """The Slurm client version (``sbatch --version``), e.g. ``slurm-wlm 22.05.8``.

    Raises:
        SlurmNotFoundError: sbatch is not installed here.
    """
    return _run(["sbatch", "--version"], timeout).strip()


def sbatch_command(job: BatchJob, settings: SlurmSettings) -> list[str]:
    """The sbatch argv that submits ``job`` under ``settings`` (the script comes on stdin).

    Jobs are submitted with ``--no-requeue``: a trial that Slurm ends (node failure,
    preemption) is retried by zeus-run as a new trial, never re-run by Slurm
    under the same job id. ``--open-mode=append``: the job's output file is
    appended to, so that a process on the node that appends to it too (the agent
    logging the training script's output) is never overwritten.
    """
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={job.name}",
        f"--output={Path(job.output).absolute()}",
        f"--chdir={Path(job.chdir).absolute()}",
        "--no-requeue",
        "--open-mode=append",
    ]
    if settings.partition:
        argv.append(f"--partition={settings.partition}")
    if settings.gpus:
        argv.append(f"--gres=gpu:{settings.gpus}")
    if settings.time:
        argv.append(f"--time={settings.time}")
    if settings.account:
        argv.append(f"--account={settings.account}")
    if settings.qos:
        argv.append(f"--qos={settings.qos}")
    argv.extend(settings.extra_args)
    return argv


def submit(job: BatchJob, settings: SlurmSettings, timeout: float = COMMAND_TIMEOUT) -> str:
    """Submit ``job`` and return its Slurm job id.

    Raises:
        SlurmSubmitError: sbatch refused the job; the message names the setting to fix.
        SlurmError: sbatch failed otherwise (``transient`` tells whether to try again).
    """
    argv = sbatch_command(job, settings)
    env = {**os.environ, **job.env} if job.env else None
    try:
        out = _run(argv, timeout, stdin=job.script, env=env)
    except SlurmError as exc:
        if exc.transient or isinstance(exc, SlurmNotFoundError):
            raise
        raise _submit_error(exc) from None
    # --parsable prints "jobid" or "jobid;cluster".
    job_id = out.strip().split(";", 1)[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch printed {out.strip()!r} instead of a job id", argv)
    logger.debug("slurm: submitted %s as job %s", job.name, job_id)
    return job_id


def query(job_ids: Iterable[str], timeout: float = COMMAND_TIMEOUT) -> dict[str, JobInfo]:
    """The jobs among ``job_ids`` that slurmctld still knows, by job id.

    A job missing from the result has been purged (it ended more than MinJobAge
    seconds ago) or never existed.

    Raises:
        SlurmError: squeue failed (``transient`` tells whether to try again).
    """
    ids = sorted({str(j) for j in job_ids}, key=int)
    if not ids:
        return {}
    argv = ["squeue", "--noheader", "--states=all", f"--jobs={','.join(ids)}", f"--Format={_FORMAT}"]
    try:
        out = _run(argv, timeout)
    except SlurmError as exc:
        # squeue fails when none of the ids is known any more.
        if "Invalid job id" in exc.stderr:
            return {}
        raise
    return {info.job_id: info for info in parse_squeue(out) if info.job_id in ids}


def find_jobs(
    names: Iterable[str] | None = None, prefix: str | None = None, timeout: float = COMMAND_TIMEOUT
) -> list[JobInfo]:
    """This user's jobs (in any state slurmctld still remembers) by exact name or name prefix.

    Args:
        names: Exact job names (none may contain a comma); None: any name.
        prefix: Keep only names that start with this; None: any.

    Raises:
        SlurmError: squeue failed.
    """
    argv = ["squeue", "--noheader", "--states=all", f"--user={_user()}", f"--Format={_FORMAT}"]
    if names is not None:
        wanted = sorted(set(names))
        if not wanted:
            return []
        bad = [n for n in wanted if "," in n]
        if bad:
            raise ValueError(f"job names with a comma cannot be looked up: {bad}")
        argv.append(f"--name={','.join(wanted)}")
    jobs = parse_squeue(_run(argv, timeout))
    if prefix is not None:
        jobs = [j for j in jobs if j.name.startswith(prefix)]
    return sorted(jobs, key=lambda j: int(j.job_id))


def cancel(
    job_ids: Iterable[str], signal: str | None = None, batch_only: bool = False, timeout: float = COMMAND_TIMEOUT
) -> None:
    """``scancel`` jobs; cancelling a job that has already ended is not an error.

    Args:
        job_ids: Jobs to signal.
        signal: None cancels the jobs (Slurm sends SIGTERM to every process, then
            SIGKILL after the cluster's KillWait; the job ends CANCELLED). A signal
            name such as ``"TERM"`` only delivers that signal and leaves the job's
            state to its exit.
        batch_only: With ``signal``, deliver it to the batch script's own process
            only (``--batch``): the agent when the script ``exec``s it, so that it
            can stop the training and write its outcome before exiting. Without it
            the signal reaches every process of the batch step (``--full``).

    Raises:
        SlurmError: scancel failed.
    """
    ids = sorted({str(j) for j in job_ids}, key=int)
    if not ids:
        return
    argv = ["scancel"]
    if signal is not None:
        argv += [f"--signal={signal}", "--batch" if batch_only else "--full"]
    elif batch_only:
        raise ValueError("batch_only needs a signal: a cancel always ends every process of the job")
    _run([*argv, *ids], timeout)
    logger.debug("slurm: %s %s", "signalled " + signal if signal else "cancelled", ",".join(ids))


# -- building blocks -----------------------------------------------------------------------


def exec_script(argv: Sequence[str], comment: str = "") -> str:
    """A batch script that replaces itself with ``argv`` (so signals sent to the
    batch step reach that process, and its exit status is the job's).

    Args:
        argv: Command and arguments; each is quoted for /bin/sh.
        comment: Optional line of context written as a comment.
    """
    if not argv:
        raise ValueError("exec_script needs a command")
    lines = ["#!/bin/sh"]
    if comment:
        lines.append("# " + " ".join(comment.splitlines()))
    lines.append("exec " + " ".join(shlex.quote(str(a)) for a in argv))
    return "\n".join(lines) + "\n"


def run_job_prefix(run_name: str, run_dir: Path) -> str:
    """The job-name prefix shared by all the trials of one run.

    It carries the run's name (for people reading ``squeue``) and a hash of its
    resolved directory, so that two runs of the same name in different
    directories never take each other's jobs.
    """
    digest = hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:8]
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "_", run_name)[:40]
    return f"zeus-{clean}-{digest}-"


def job_name(run_name: str, run_dir: Path, trial: str) -> str:
    """The job name of one trial: `run_job_prefix` followed by ``trial`` (e.g. ``r0003-t01``)."""
    return run_job_prefix(run_name, run_dir) + re.sub(r"[^A-Za-z0-9_.-]+", "_", trial)


def parse_squeue(out: str) -> list[JobInfo]:
    """Parse lines printed by squeue with the `JobInfo` format."""
    jobs = []
    n = len(_FIELDS)
    for line in out.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", n)
        if len(parts) != n + 1:
            raise SlurmError(f"cannot read squeue line {line!r}: expected {n + 1} fields")
        job_id, state, reason, status, batch_host, nodes, submitted, started, ended = (p.strip() for p in parts[:n])
        base_state = state.split()[0] if state else ""
        jobs.append(
            JobInfo(
                job_id=job_id,
                name=parts[n].rstrip(),
                state=base_state,
                reason=reason,
                exit_status=int(status) if status.isdigit() and is_final(base_state) else None,
                batch_host=_value(batch_host),
                nodes=_value(nodes),
                submit_time=_value(submitted),
                start_time=_value(started),
                end_time=_value(ended),
            )
        )
    return jobs


def _value(text: str) -> str | None:
    return None if text in _EMPTY else text


def _user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def _run(argv: list[str], timeout: float, stdin: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """Run one Slurm command and return its stdout."""
    try:
        proc = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except FileNotFoundError:
        raise SlurmNotFoundError(
            f"{argv[0]} is not installed here (or not on PATH): the slurm executor needs the Slurm client "
            "commands (sbatch, squeue, scancel) on the machine that runs zeus-run. Run zeus-run on a login "
            "node, or load the cluster's Slurm module",
            argv,
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"{shlex.join(argv)} did not answer within {timeout:g} s (is slurmctld up? `sinfo` tells)",
            argv,
            transient=True,
        ) from None
    if proc.returncode != 0:
        err = proc.stderr.strip()
        raise SlurmError(
            f"{shlex.join(argv)} failed (exit {proc.returncode}): {err or '(no message)'}",
            argv,
            err,
            bool(_TRANSIENT.search(err)),
        )
    return proc.stdout


def _submit_error(exc: SlurmError) -> SlurmSubmitError:
    for pattern, setting, fix in _SUBMIT_HINTS:
        if pattern.search(exc.stderr):
            return SlurmSubmitError(
                f"Slurm refused the trial's job because of {setting}: {exc.stderr}. Fix {setting}: {fix}",
                exc.command,
                exc.stderr,
            )
    return SlurmSubmitError(
        f"Slurm refused the trial's job: {exc.stderr or '(no message)'}. "
        "Check the executor settings (partition, gpus, time, account, qos, extra_args)",
        exc.command,
        exc.stderr,
    )
