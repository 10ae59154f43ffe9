"""Running the server in the foreground: check the bind, lock the root, listen, serve until a signal.

The socket is bound here (``--port 0``: any free port), before uvicorn
starts, so the address logged (``listening on http://HOST:PORT``) is the real
one. SIGINT/SIGTERM stop it gracefully; a SIGKILL loses nothing, since every
answered request is already on disk. There is no supervisor here: run it
under systemd, a Kubernetes Deployment or Docker's restart policy.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from pathlib import Path

from zeus_run.remote import DEFAULT_PORT
from zeus_run.server._gate import DEFAULT_MAX_BODY
from zeus_run.server._root import LOCAL_TOKEN_NAME, ServerRoot
from zeus_run.server._security import check_bind, local_token, read_token_file

logger = logging.getLogger(__name__)

#: Most requests handled at once; more wait in the kernel's queue (uvicorn answers 503 past it).
MAX_CONCURRENT = 512
#: How long an idle kept-alive connection stays open (unit: s).
KEEP_ALIVE_S = 30


@dataclass(frozen=True)
class ServeSettings:
    """``zeus-run serve``'s options.

    Attributes:
        root: Directory of the jobs' run directories.
        host: Address to bind.
        port: Port to bind (0: any free port).
        token_file: File holding the bearer token (None: loopback only, with a generated token).
        max_body: Largest request body (unit: bytes).
    """

    root: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token_file: Path | None = None
    max_body: int = DEFAULT_MAX_BODY


def serve(settings: ServeSettings) -> None:
    """Serve until SIGINT/SIGTERM.

    Raises:
        UsageError: A non-loopback host without a token file, a bad token file,
            or a port that cannot be bound.
        RunDirBusy: Another server holds the root.
    """
    import uvicorn

    from zeus_run.errors import UsageError
    from zeus_run.server._app import create_app
    from zeus_run.server._jobs import JobService

    check_bind(settings.host, settings.token_file is not None)
    token = read_token_file(settings.token_file) if settings.token_file else None
    root = ServerRoot(settings.root)
    try:
        if token is None:
            token, where = local_token(root.path, LOCAL_TOKEN_NAME)
            logger.info("no --token-file: loopback only; clients read the token from %s", where)
        try:
            sock = _bind(settings.host, settings.port)
        except OSError as exc:
            raise UsageError(
                f"Cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}. "
                "Choose another --port (0: any free one) or --host."
            ) from None
        app = create_app(JobService(root), token, settings.max_body)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        logger.info(
            "zeus-run serve: listening on http://%s:%d (root %s, %d job(s))", shown, port, root.path, len(root.jobs())
        )
        config = uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="off",
            limit_concurrency=MAX_CONCURRENT,
            timeout_keep_alive=KEEP_ALIVE_S,
            server_header=False,
        )
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        root.close()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # NOTE: proto must say TCP: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say so, and
    # with Nagle on, a kept-alive client waits out the peer's delayed ACK (40 ms) on every answer.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    # NOTE: SO_REUSEADDR lets a restarted server take its port back while old
    # connections sit in TIME_WAIT; it does not let two servers share a port.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock
