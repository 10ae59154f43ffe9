"""``zeus-run serve --workers 2``: two processes answer one job's clients; they live and die together."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.cli.test_join import wait_until
from tests.server.helpers import ServerProcess
from tests.server.test_server_jobs import TOKEN, check_complete, clients, demo_spec, finish, records


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
