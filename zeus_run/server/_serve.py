"""Running the server in the foreground: check the bind, lock the root, listen, serve until a signal.

The socket is bound here (``--port 0``: any free port), before uvicorn
starts, so the address logged (``listening on http://HOST:PORT``) is the real
one. SIGINT/SIGTERM stop it gracefully, with a line in the log and exit status
0; a SIGKILL loses nothing, since every answered request is already on disk. There is no supervisor here: run it
under systemd, a Kubernetes Deployment or Docker's restart policy.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from zeus_run.errors import UsageError, ZeusRunError
from zeus_run.remote import DEFAULT_PORT
from zeus_run.server import _logs
from zeus_run.server._gate import DEFAULT_MAX_BODY
from zeus_run.server._limits import MAX_CONNECTIONS
from zeus_run.server._listener import Balance, Listener
from zeus_run.server._root import LOCAL_TOKEN_NAME, ServerRoot
from zeus_run.server._security import check_bind, local_token, read_token_file

logger = logging.getLogger(__name__)

#: Most requests handled at once (uvicorn answers 503 past it); above `MAX_CONNECTIONS`, so that a connection the
#: server keeps is never answered 503 for the number of connections alone.
MAX_CONCURRENT = MAX_CONNECTIONS + 12
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
        workers: Processes that answer requests.
        allow_paths: Directories outside the jobs whose files a registered spec may name (``--allow-path``).
    """

    root: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token_file: Path | None = None
    max_body: int = DEFAULT_MAX_BODY
    workers: int = 1
    allow_paths: tuple[Path, ...] = ()


def serve(settings: ServeSettings) -> None:
    """Serve until SIGINT/SIGTERM.

    Raises:
        UsageError: A non-loopback host without a token file, a bad token file,
            or a port that cannot be bound.
        RunDirBusy: Another server holds the root.
    """
    import uvicorn

    from zeus_run.server._app import create_app
    from zeus_run.server._jobs import JobService
    from zeus_run.server._protocol import GuardedProtocol
    from zeus_run.server._uvicorn import QuietServer, catch_early_signals

    check_bind(settings.host, settings.token_file is not None)
    token = read_token_file(settings.token_file) if settings.token_file else None
    root = ServerRoot(settings.root)
    try:
        if token is None:
            token, where, made = local_token(root.path, LOCAL_TOKEN_NAME)
            logger.info(
                "no --token-file: loopback only; the operator's token is in %s (%s; kept across restarts)",
                where,
                "made now" if made else "the one made before",
            )
        _logs.install(("zeus_run", "uvicorn"), secrets=(token,))
        try:
            sock = _bind(settings.host, settings.port)
        except OSError as exc:
            raise UsageError(
                f"Cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}. "
                "Choose another --port (0: any free one) or --host."
            ) from None
        allowed = tuple(Path(os.path.abspath(p)) for p in settings.allow_paths)
        app = create_app(JobService(root, allowed=allowed), token, settings.max_body)
        pending = catch_early_signals()
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        logger.info(
            "zeus-run serve: listening on http://%s:%d (root %s, %d job(s))", shown, port, root.path, len(root.jobs())
        )
        with _workers(settings.workers, sock) as (index, lost):
            config = uvicorn.Config(
                app,
                log_config=None,
                access_log=False,
                lifespan="off",
                limit_concurrency=MAX_CONCURRENT,
                timeout_keep_alive=KEEP_ALIVE_S,
                http=GuardedProtocol,  # header and body deadlines, a cap on connections (`_protocol`)
                server_header=False,
                # asyncio's accept, never uvloop's (taken by 'auto' where installed): the workers' sharing is asyncio's
                # accept (`_listener`), and uvloop's listen kept backlog=1 as the kernel's queue (bursts were reset).
                loop="asyncio",
                backlog=sock.accepts_per_wakeup(),
            )
            server = QuietServer(config, pending)
            if sock.balance is not None:
                sock.balance.attach(index)
            server.run(sockets=[sock])
            if index:
                os._exit(0)  # a worker: nothing of the parent's to clean up
        if lost.is_set():
            raise ZeusRunError("A worker process exited, so the server stopped; restart it (its log says why).")
        logger.info("zeus-run serve: stopped (%s); every answered request is on disk", server.stopped_by or "exit")
    finally:
        root.close()


@contextlib.contextmanager
def _workers(n: int, sock: Listener) -> Iterator[tuple[int, threading.Event]]:
    """Fork ``n - 1`` workers that serve the same socket beside this process; yields this process's index (0: the
    parent), and an event set when a worker died (the server then stops with an error). The processes share the
    socket's connections (`zeus_run.server._listener.Balance`).

    Each worker has its own jobs' state and takes each job's run-directory lock per ask and tell,
    exactly as a ``zeus-run tell`` from another host does, so a job stays consistent across them.
    They live and die together, with no supervisor of their own: a worker gets SIGTERM when the
    parent exits (``PR_SET_PDEATHSIG``), and the parent stops (SIGTERM to itself) when a worker
    exits, so whatever runs the server (systemd, a Deployment) restarts the whole of it.
    """
    lost = threading.Event()
    if n <= 1:
        yield 0, lost
        return
    if not sys.platform.startswith("linux"):
        raise UsageError(f"--workers {n}: several worker processes need Linux; run one server per machine here.")
    parent = os.getpid()
    children: list[int] = []
    stopping = threading.Event()
    sock.balance = Balance(n)
    for index in range(1, n):
        pid = os.fork()
        if pid == 0:
            _die_with(parent)
            yield index, lost
            return
        children.append(pid)
    logger.info("zeus-run serve: %d worker processes (pids %s)", n, " ".join(map(str, [parent, *children])))

    def watch() -> None:
        while True:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                return
            if pid in children and not stopping.is_set():
                lost.set()
                logger.error(
                    "worker %d exited (%s); stopping the server so that what runs it restarts it whole",
                    pid,
                    os.waitstatus_to_exitcode(status),
                )
                os.kill(parent, signal.SIGTERM)
                return

    threading.Thread(target=watch, name="zeus-run serve workers", daemon=True).start()
    try:
        yield 0, lost
    finally:
        stopping.set()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _die_with(parent: int) -> None:
    """Have the kernel send this process SIGTERM when ``parent`` exits (and exit now if it already has)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(0)


def _bind(host: str, port: int) -> Listener:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # NOTE: proto must say TCP: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say so, and
    # with Nagle on, a kept-alive client waits out the peer's delayed ACK (40 ms) on every answer.
    sock = Listener(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    # NOTE: SO_REUSEADDR lets a restarted server take its port back while old
    # connections sit in TIME_WAIT; it does not let two servers share a port.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen()
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock
