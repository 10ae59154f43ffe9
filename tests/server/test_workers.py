"""``zeus-run serve --workers 2``: two processes answer one job's clients; they live and die together."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_join import wait_until
from tests.server.helpers import ServerProcess
from tests.server.test_server_jobs import TOKEN, check_complete, clients, demo_spec, finish, records
from zeus_run.remote import HEALTH_PATH
from zeus_run.server._listener import BACKLOG


def start(tmp_path: Path, port: int = 0) -> ServerProcess:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    proc = ServerProcess(tmp_path / "root", port=port, extra=("--token-file", str(token_file), "--workers", "2"))
    proc.wait_ready()
    return proc


def workers(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_two_workers_serve_three_clients_of_one_job_and_the_audit_passes(tmp_path):
    server = start(tmp_path)
    try:
        wait_until("the second worker runs", lambda: len(workers(server.proc.pid)) == 1)
        server.client(TOKEN).register("demo", demo_spec(10))
        outs = finish(clients(server.url, 3))
        assert sum("job complete" in o for o in outs) == 3
        check_complete(server.root / "demo", 10)  # each trial once, every epoch once, replay passes
    finally:
        server.stop()
    assert not workers(server.proc.pid)


def test_a_killed_server_takes_its_workers_with_it_and_a_restart_serves_on(tmp_path):
    server = start(tmp_path)
    wait_until("the second worker runs", lambda: len(workers(server.proc.pid)) == 1)
    (child,) = workers(server.proc.pid)
    server.client(TOKEN).register("demo", demo_spec(10))
    procs = clients(server.url, 3, "demo", "--epoch-time", "0.05")
    run_dir = server.root / "demo"
    wait_until("3 trials are recorded", lambda: len(records(run_dir)) >= 3)
    server.kill()  # SIGKILL: the worker gets SIGTERM from the kernel (PR_SET_PDEATHSIG) and ends
    wait_until("the worker is gone", lambda: not alive(child))
    restarted = start(tmp_path, port=server.port)
    try:
        finish(procs)
        check_complete(run_dir, 10)
    finally:
        restarted.stop()


def test_a_dead_worker_stops_the_server_so_that_what_runs_it_restarts_it(tmp_path):
    server = start(tmp_path)
    try:
        wait_until("the second worker runs", lambda: len(workers(server.proc.pid)) == 1)
        (child,) = workers(server.proc.pid)
        os.kill(child, signal.SIGKILL)
        server.exit_code()  # it stops by itself
        assert any(f"worker {child} exited" in line for line in server.lines), "".join(server.lines)
    finally:
        server.stop()


def _served_by(port: int, client: socket.socket, pids: list[int]) -> int | None:
    """The process among ``pids`` whose file descriptors hold the server's end of ``client``'s connection."""
    mine = client.getsockname()[1]
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local, remote = int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16)
                if local == port and remote == mine:
                    inode = fields[9]
    wanted = f"socket:[{inode}]"
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == wanted:
                    return pid
    return None


def _health(client: socket.socket) -> None:
    """A request on the kept-alive connection, and its whole answer."""
    client.sendall(f"GET {HEALTH_PATH} HTTP/1.1\r\nHost: test\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
        chunk = client.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    assert data.startswith(b"HTTP/1.1 200"), data


def _length(data: bytes) -> int:
    head = data.split(b"\r\n\r\n", 1)[0].decode().lower()
    return next(int(line.split(":", 1)[1]) for line in head.split("\r\n") if line.startswith("content-length:"))


def test_a_burst_of_kept_alive_connections_is_shared_between_the_workers(tmp_path):
    """Eight clients that connect at once and keep their connections: both processes answer a share of them
    (asyncio alone took a whole burst in the process that woke first: 7 or 8 of 8, and the other sat idle). On an
    idle host the split is 4 and 4; a process declines for at most `YIELD_S` (50 ms) before it takes a
    connection itself, so on a loaded host, where the other process may not run within that, 5 and 3 (seen beside
    two CPU hogs) or 6 and 2 are the design, never 7 and 1."""
    server = start(tmp_path)
    conns: list[socket.socket] = []
    try:
        wait_until("the second worker runs", lambda: len(workers(server.proc.pid)) == 1)
        pids = [server.proc.pid, *workers(server.proc.pid)]

        def served_by_worker() -> bool:
            with socket.create_connection(("127.0.0.1", server.port)) as probe:
                _health(probe)
                return _served_by(server.port, probe, pids) == pids[1]

        wait_until("the worker process serves", served_by_worker)
        conns = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(8)]  # queued before any accept
        for conn in conns:
            _health(conn)
        owners = [_served_by(server.port, conn, pids) for conn in conns]
        assert min(owners.count(pid) for pid in pids) >= 2, owners
    finally:
        for conn in conns:
            conn.close()
        server.stop()


def test_the_kernel_queues_a_burst_whatever_event_loop_is_installed(tmp_path):
    """The listening socket's queue is `BACKLOG` long in each process, with uvloop installed too (the test extra
    installs it, as ``uvicorn[standard]`` does): uvloop, which uvicorn takes where it finds it, listened with
    the backlog of 1 meant for asyncio's accept, and 32 clients that connected at once were reset."""
    if shutil.which("ss") is None:
        pytest.skip("`ss` (iproute2) is not installed: it shows a listening socket's queue length")
    server = start(tmp_path)
    try:
        wait_until("the second worker runs", lambda: len(workers(server.proc.pid)) == 1)
        out = subprocess.run(
            ["ss", "-Hltn", f"sport = :{server.port}"], capture_output=True, text=True, check=True
        ).stdout
        queues = [int(line.split()[2]) for line in out.splitlines() if line.startswith("LISTEN")]
        assert queues and min(queues) >= BACKLOG, out
    finally:
        server.stop()
