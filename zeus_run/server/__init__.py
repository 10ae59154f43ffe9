"""``zeus-run serve``: the batch-size server, the network front of the ask/tell engine.

Training jobs that share no filesystem with zeus-run (Kubernetes pods, managed
services) reach their job's run directory through it. The server is an
optional extra (``pip install 'zeus-run[server]'``: FastAPI and uvicorn);
the client (`zeus_run.remote`) is standard library only.

* `_root`: the root directory, job names, one server per root;
* `_security`: the operator's token (kept in the root without ``--token-file``) and where the server may listen;
* `_tokens` and `_access`: the jobs' own tokens (hashes only) and what each may reach;
* `_gate`: who is asking, body limit and access log for every request;
* `_logs`: log lines with control characters escaped and no token;
* `_limits` and `_protocol`: physical bounds on values; header and body deadlines and a cap on connections;
* `_models` and `_errors`: request/response bodies and 4xx answers;
* `_jobs`: the jobs, over `zeus_run.asktell`;
* `_app`: the routes; `_serve`: the foreground process.
"""

from zeus_run.server._root import check_job_name
from zeus_run.server._serve import ServeSettings, serve
from zeus_run.server._tokens import TokenStore

__all__ = [
    "ServeSettings",
    "TokenStore",
    "check_job_name",
    "serve",
]
