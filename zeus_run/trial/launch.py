"""Starting a trial's command: its environment (`trial_environment`) and the checks before the first trial (`preflight`).

Every door that launches a script (``run``, the Slurm agent, ``exec``) builds the
script's environment here, and only here.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from zeus_run.contract import Env
from zeus_run.errors import LaunchEnvironmentError, LaunchError

_INTERPRETERS = re.compile(r"^(python[0-9.]*|pypy[0-9.]*|bash|sh|zsh|perl|ruby|node|Rscript)$")

#: ``ZEUS_*`` variables of the launcher-script contract (`zeus_run.train`). A
#: launcher that itself runs inside a trial does not pass its own on.
CONTRACT_VARS = Env.names()

#: Variables every trial gets unless the spec's ``env`` sets them. Python
#: block-buffers stdout into a pipe: without ``PYTHONUNBUFFERED`` a script that
#: prints without flushing delivers every epoch at its exit, and zeus-run can
#: neither time its epochs nor stop it at the target (README, "The training script").
TRIAL_DEFAULTS = {"PYTHONUNBUFFERED": "1"}
#: Added under ``stdout: pty`` unless the spec's ``env`` sets them: a terminal
#: that asks for no colours or cursor movement (the log keeps text, not screen updates).
PTY_DEFAULTS = {"TERM": "dumb"}


def trial_environment(additions: Mapping[str, str], token: str = "", stdout: str = "pipe") -> dict[str, str]:
    """The script's complete environment.

    The launcher's own, without its trial contract; then `TRIAL_DEFAULTS` (and
    `PTY_DEFAULTS` when ``stdout`` is ``pty``); then ``additions`` (the ``ZEUS_*``
    contract and the spec's ``env``, which may override a default, e.g.
    ``PYTHONUNBUFFERED: ""`` to leave Python's buffering on); then the trial's token.

    Args:
        additions: Variables the trial plan adds (`zeus_run.contract.TrialPlan.env`).
        token: The trial's process marker (``ZEUS_TRIAL_TOKEN``); empty: none.
        stdout: The trial's output channel, ``pipe`` or ``pty`` (`zeus_run.contract.TrialPlan.stdout`).
    """
    env = {k: v for k, v in os.environ.items() if k not in CONTRACT_VARS}
    env.update(TRIAL_DEFAULTS)
    if stdout == "pty":
        env.update(PTY_DEFAULTS)
    env.update(additions)
    if token:
        env[Env.TRIAL_TOKEN] = token
    return env


def preflight(argv: tuple[str, ...], workdir: Path, env: Mapping[str, str], shell: bool) -> None:
    """Check the command can start at all, before any trial is recorded.

    Raises:
        LaunchError: The program is missing or not executable, or the script
            given to an interpreter (``python train.py``) does not exist.
    """
    if not workdir.is_dir():
        raise LaunchError(f"Working directory {str(workdir)!r} does not exist. Fix `workdir` in the job spec.")
    if shell:
        return
    prog = argv[0]
    if "/" in prog:
        path = Path(prog) if os.path.isabs(prog) else workdir / prog
        if not path.is_file():
            raise LaunchError(
                f"Training command {prog!r} does not exist (looked in {str(workdir)!r}). Fix `command` in the job spec."
            )
        if not os.access(path, os.X_OK):
            raise LaunchError(
                f"Training command {prog!r} is not executable. Run `chmod +x {prog}` or prefix the interpreter in `command`."
            )
    elif shutil.which(prog, path=env.get("PATH", os.defpath)) is None:
        raise LaunchError(
            f"Training command {prog!r} was not found on PATH. Install it or give its full path in `command`."
        )
    if _INTERPRETERS.match(os.path.basename(prog)):
        script = _script_argument(argv[1:])
        if script is not None:
            path = Path(script) if os.path.isabs(script) else workdir / script
            if not path.exists():
                raise LaunchError(
                    f"Training script {script!r} does not exist (looked in {str(workdir)!r}). "
                    "Fix `command` or `workdir` in the job spec (relative paths start at the spec file's folder)."
                )


#: Errors of ``exec`` that say what is wrong with the command itself (missing, not executable, not a program).
_COMMAND_ERRNOS = frozenset(
    {
        errno.ENOENT,
        errno.EACCES,
        errno.ENOEXEC,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.ELOOP,
        errno.ENAMETOOLONG,
        errno.E2BIG,
    }
)
#: What to do about an error of this machine that stopped a trial from starting.
_MACHINE_FIXES = {
    errno.EMFILE: "Raise the open-file limit (ulimit -n) or let this process hold fewer files",
    errno.ENFILE: "The whole system is out of open files: close other programs, or raise fs.file-max",
    errno.EAGAIN: "Free processes or raise the process limit (ulimit -u)",
    errno.ENOMEM: "Free memory",
    errno.ENOSPC: "Free disk space",
}


def launch_error(program: str, exc: OSError) -> LaunchError | LaunchEnvironmentError:
    """The error to raise when starting ``program`` (the command's first word) failed with ``exc``.

    An error that names the command (missing, not executable, not a program) is the spec's
    (`LaunchError`: fix ``command``); any other (too many open files, no memory or processes
    left) is this machine's (`LaunchEnvironmentError`): nothing was started, nothing is recorded.
    """
    why = exc.strerror or str(exc)
    if exc.errno in _COMMAND_ERRNOS:
        return LaunchError(f"Could not start {program!r}: {why}. Fix `command` in the job spec.")
    fix = _MACHINE_FIXES.get(exc.errno or 0, "Fix the cause")
    return LaunchEnvironmentError(
        f"Could not start {program!r}: {why} (errno {errno.errorcode.get(exc.errno or 0, exc.errno)}). This is an "
        f"error of this machine, not of `command`; nothing was started or recorded. {fix}, then run the same "
        "command again."
    )


def _script_argument(args: tuple[str, ...]) -> str | None:
    for a in args:
        if a in ("-m", "-c", "-e"):
            return None
        if a.startswith("-"):
            continue
        return a
    return None
