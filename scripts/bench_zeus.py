"""Zeus 0.16's own batch-size server and the clients of both protocols, for ``bench_server.py --versus-zeus``.

Zeus's server (``zeus.optimizer.batch_size.server.router:app``) needs
``zeus[bso-server]==0.16.0`` plus ``greenlet`` and ``aiosqlite`` (its SQLite
driver), in a virtual environment of their own: it pins pydantic < 2, which
zeus-run's server does not run on. `make_venv` makes one (``.venv-zeus-bso``).
It ships no migrations, so `start_zeus` creates its tables from its SQLAlchemy
schema (``Base.metadata.create_all``) before it serves, from one SQLite file
(``ZEUS_BSO_DATABASE_URL=sqlite+aiosqlite:///...``), one process, logging at
WARN and no access log (as zeus-run without ``-v``).

Both servers are driven by the same loop (`Driver`): per trial one ask, one
report per epoch (time 0.01 s and energy 1 J per epoch; the last reaches the
target), and one end (zeus-run: finish; Zeus: ``PATCH /trials``, as its
client's ``atexit`` sends it): 2 + epochs requests, on one kept-alive
connection per client.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: Where `make_venv` puts Zeus's server.
DEFAULT_VENV = REPO / ".venv-zeus-bso"
ZEUS_PACKAGES = ["zeus[bso-server]==0.16.0", "greenlet", "aiosqlite"]

#: Run by Zeus's venv: create the tables, bind a free port, print it, serve.
_LAUNCH = r"""
import logging, socket, sys
from sqlalchemy import create_engine
from zeus.optimizer.batch_size.server.database.schema import Base
engine = create_engine("sqlite:///" + sys.argv[1])
Base.metadata.create_all(engine)
engine.dispose()
import uvicorn
from zeus.optimizer.batch_size.server.router import app
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
sock.listen(1024)
print("listening on http://127.0.0.1:%d" % sock.getsockname()[1], file=sys.stderr, flush=True)
config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", server_header=False)
uvicorn.Server(config).run(sockets=[sock])
"""


def make_venv(path: Path = DEFAULT_VENV) -> Path:
    """Zeus's server in a venv of its own (made if missing); returns its python."""
    python = path / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *ZEUS_PACKAGES], check=True)
    return python


def start_zeus(python: Path, db: Path) -> tuple[subprocess.Popen, str]:
    """Zeus 0.16's batch-size server on a free loopback port, with its tables in ``db``."""
    env = {
        **os.environ,
        "ZEUS_BSO_DATABASE_URL": f"sqlite+aiosqlite:///{db}",
        "ZEUS_BSO_LOG_LEVEL": "WARN",
        "ZEUS_BSO_ECHO_SQL": "false",
    }
    proc = subprocess.Popen(
        [str(python), "-c", _LAUNCH, str(db)],
        cwd=db.parent,  # its settings read a .env found from here: none
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # type: ignore[union-attr]
            return proc, m.group(1)
    raise SystemExit(f"Zeus's server did not start (exit {proc.wait()}):\n{''.join(lines[-20:])}")


class Driver:
    """One client's connection to one server; ``kind`` is ``v1`` (zeus-run's API) or ``zeus`` (Zeus's)."""

    def __init__(self, kind: str, url: str, token: str = "") -> None:
        u = urllib.parse.urlsplit(url)
        self.kind = kind
        self.prefix = u.path.rstrip("/")
        self.token = token
        self.conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=300)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.kind == "v1":
            headers["Authorization"] = f"Bearer {self.token}"
        for attempt in range(2):
            try:
                self.conn.request(method, self.prefix + path, body=data, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
                break
            except (ConnectionError, http.client.HTTPException):
                self.conn.close()  # a kept-alive connection the server closed: once more on a new one
                if attempt:
                    raise
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path}: {resp.status} {raw[:300]!r}")
        return json.loads(raw or b"null")

    def register(self, job: str, epochs: int) -> Any:
        """Register ``job``; zeus-run's answer (with the job's own token, ``job_token``) or Zeus's."""
        settings = {"batch_sizes": [8, 16, 32], "default_batch_size": 16, "target_metric": 0.9}
        if self.kind == "v1":
            spec = {
                "name": job,
                "command": ["true"],  # launched by nothing: the clients are the trials
                **settings,
                "max_epochs": epochs + 1,
                "eta": 0.5,
                "beta": 2.0,
                "recurrences": None,
                "seed": 1,
                "optimizer": {"policy": "zeus"},  # Zeus's algorithm, as Zeus's server runs it
                "energy": {"source": "estimate", "watts": 100, "basis": "wall-time"},
            }
            return self.call("PUT", f"/v1/jobs/{job}", {"spec": spec})
        return self.call(
            "POST",
            "/jobs",
            {
                "job_id": job,
                "job_id_prefix": job.split("-")[0],
                **settings,
                "max_epochs": epochs + 1,
                "eta_knob": 0.5,
                "beta_knob": 2.0,
                "mab_seed": 1,
                "max_power": 100.0,
                "number_of_gpus": 1,
                "gpu_model": "bench",
            },
        )

    def ask(self, job: str) -> dict[str, Any]:
        if self.kind == "v1":
            return {"job": job, **self.call("POST", f"/v1/jobs/{job}/trials", {})}
        return self.call("GET", "/jobs/batch_size?" + urllib.parse.urlencode({"job_id": job}))

    def report(self, trial: dict[str, Any], epoch: int, metric: float) -> bool:
        t, e = 0.01 * epoch, 1.0 * epoch
        if self.kind == "v1":
            body = {"epoch": epoch, "metric": metric, "time": t, "energy": e}
            return bool(self.call("POST", f"/v1/jobs/{trial['job']}/trials/{trial['token']}/epochs", body)["stop"])
        result = {"job_id": trial["job_id"], "batch_size": trial["batch_size"], "trial_number": trial["trial_number"]}
        answer = self.call(
            "POST", "/report", {**result, "time": t, "energy": e, "metric": metric, "current_epoch": epoch}
        )
        return bool(answer["stop_train"])

    def end(self, trial: dict[str, Any], epochs: int) -> None:
        if self.kind == "v1":
            body = {"time": 0.01 * epochs, "energy": 1.0 * epochs}
            self.call("POST", f"/v1/jobs/{trial['job']}/trials/{trial['token']}/finish", body)
            return
        ident = {"job_id": trial["job_id"], "batch_size": trial["batch_size"], "trial_number": trial["trial_number"]}
        self.call("PATCH", "/trials", ident)


def disk_bytes(path: Path) -> tuple[int, int]:
    """Bytes on disk (allocated blocks) and entries under ``path`` (a directory or a file and its -wal/-journal)."""
    if path.is_file():
        items = [p for p in (path, Path(f"{path}-wal"), Path(f"{path}-journal"), Path(f"{path}-shm")) if p.exists()]
        return sum(os.stat(p).st_blocks * 512 for p in items), len(items)
    total = files = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            files += 1
    return total, files
