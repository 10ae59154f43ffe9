"""Starting a trial's command: its environment (`trial_environment`) and the checks before the first trial (`preflight`)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from zeus_run.contract import Env
from zeus_run.errors import LaunchError

_INTERPRETERS = re.compile(r"^(python[0-9.]*|pypy[0-9.]*|bash|sh|zsh|perl|ruby|node|Rscript)$")

#: ``ZEUS_*`` variables of the launcher-script contract (`zeus_run.train`). A
#: launcher that itself runs inside a trial does not pass its own on.
CONTRACT_VARS = Env.names()


def trial_environment(additions: Mapping[str, str], token: str = "") -> dict[str, str]:
    """The script's complete environment: the launcher's, without its own trial contract, plus ``additions``."""
    env = {k: v for k, v in os.environ.items() if k not in CONTRACT_VARS}
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


def _script_argument(args: tuple[str, ...]) -> str | None:
    for a in args:
        if a in ("-m", "-c", "-e"):
            return None
        if a.startswith("-"):
            continue
        return a
    return None
