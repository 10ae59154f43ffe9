"""What a remote client is shown: HTTP wording, and no path of the server's disk.

The library speaks to a shell user: it names absolute paths and the CLI's exit
codes. A remote client knows neither, so every answer and error text passes
through `Publisher`: paths under the root become job-relative
(``demo/trials/r0001-t01``), other absolute paths are cut to their last part,
and ``(exit code N)`` and the CLI's hints go. `job_terms` takes the server's
interpreter and directories out of an ask's answer. `redact` keeps trial
tokens out of the log.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from zeus_run.contract import Env

_EXIT_CODE = re.compile(r"\s*\(exit code -?\d+\)")
_QUOTED_PATH = re.compile(r"'(/[^'\n]*)'")
#: The CLI's hints, and what a client of the API does instead.
_HINTS = (
    (
        "Pass the token `zeus-run ask` printed (ZEUS_ASK_TOKEN) with the run directory it named (ZEUS_RUN_DIR).",
        "Use the token the ask answered, under the job that asked it.",
    ),
    ("(zeus-run exec and zeus_run.train.Trial do it; or zeus-run heartbeat)", "(POST .../heartbeat or a report)"),
    ("tell them back (zeus-run tell)", "tell them back (POST .../finish or .../fail)"),
    ("tell those back,", "tell those back (or DELETE .../trials/TOKEN),"),
)


class Publisher:
    """Rewrites texts and answers for a remote client.

    Args:
        root: The server's root directory.
    """

    def __init__(self, root: Path) -> None:
        self._root = str(root).rstrip(os.sep)
        self._json_root = json.dumps(self._root + os.sep)[1:-1]

    def text(self, message: str) -> str:
        """An error text with job-relative paths and no CLI exit codes."""
        out = message.replace(self._root + os.sep, "").replace(self._root, "the server root")
        out = _EXIT_CODE.sub("", out)
        for cli, api in _HINTS:
            out = out.replace(cli, api)
        return _QUOTED_PATH.sub(lambda m: repr(os.path.basename(m.group(1).rstrip("/")) or "/"), out)

    def payload(self, doc: Any) -> bytes:
        """An answer as JSON, with paths under the root made job-relative (``demo/trials/...``)."""
        return json.dumps(doc, allow_nan=False).replace(self._json_root, "").encode()


_TRIAL_TOKEN = re.compile(r"(/trials/)([^/]+)")
_SERVER_TOKEN = re.compile(r"^/zeus/[^/]+(?=/)")  # a token still in the path (the gate strips it first)
#: Characters of a trial token shown in the log (enough to tell trials apart, too few to use).
SHORT_ID = 6


def redact(path: str) -> str:
    """A request path for the log: a trial token cut to a short id, a ``/zeus/<token>`` prefix hidden."""
    path = _SERVER_TOKEN.sub("/zeus/***", path)
    return _TRIAL_TOKEN.sub(lambda m: f"{m.group(1)}{m.group(2)[:SHORT_ID]}~", path)


#: The placeholders an ask's ``command`` keeps for the client to fill in (`zeus_run.remote.ServerClient.ask`):
#: its own interpreter and its own directory.
PYTHON_PLACEHOLDER = "{python}"
LOG_DIR_PLACEHOLDER = "{log_dir}"
#: The contract's variables that name files of the server's run directory: a server's client reports over
#: HTTP (ZEUS_SERVER), so an ask's answer leaves them out.
_SERVER_FILES = frozenset({Env.LOG_DIR, Env.EVENT_LOG, Env.STOP_FILE, Env.RUN_DIR, Env.HEARTBEAT, Env.PROFILE_STOP})


def job_terms(ask: dict[str, Any]) -> dict[str, Any]:
    """An ask's answer (`zeus_run.asktell.Ask.to_json`) in the job's terms, not the server's: no ``workdir``
    (the client runs where it is), the server's interpreter in ``command`` back to ``{python}`` and the trial's
    directory to ``{log_dir}`` (the client fills both in), and no variable naming the server's files."""
    subs = [(shlex.quote(sys.executable), PYTHON_PLACEHOLDER), (sys.executable, PYTHON_PLACEHOLDER)]
    trial_dir = str(ask.get("trial_dir") or "")
    if trial_dir:
        subs = [(shlex.quote(trial_dir), LOG_DIR_PLACEHOLDER), (trial_dir, LOG_DIR_PLACEHOLDER), *subs]

    def fill(text: str) -> str:
        for old, new in subs:
            if old in text:
                text = text.replace(old, new)
        return text

    ask["command"] = [fill(a) for a in ask.get("command") or ()]
    ask["env"] = {k: fill(v) for k, v in (ask.get("env") or {}).items() if k not in _SERVER_FILES}
    ask["workdir"] = None
    return ask
