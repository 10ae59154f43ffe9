"""Zeus's own client, unchanged, against ``zeus-run serve``: three training sessions through the job's own token,
then replay; then a session after a restart with the server's kept token.

Needs the ``zeus`` package (0.16; ``scripts/install_integrations.sh`` installs
it into .venv); skipped without it. Each session is a process that runs
`tests/scripts/zeus_bso_session.py` with Zeus's real ``BatchSizeOptimizer``;
only its GPU discovery and its ``ZeusMonitor`` are doubles (no GPU here).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.server.helpers import REPO, ServerProcess

pytestmark = pytest.mark.integrations
SESSION = REPO / "tests" / "scripts" / "zeus_bso_session.py"


def _session(url: str, metrics: str) -> str:
    done = subprocess.run([sys.executable, str(SESSION), url, metrics], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_three_sessions_of_zeus_batch_size_optimizer(real_server: ServerProcess):
    server = real_server  # Zeus's client reaches it by its URL
    pytest.importorskip(
        "zeus.optimizer.batch_size.client",
        reason="Zeus is not installed: scripts/install_integrations.sh installs zeus==0.16.0 into .venv",
    )
    made = subprocess.run(
        [sys.executable, "-m", "zeus_run", "serve", "tokens", "rotate", "--root", str(server.root), "mnist-nightly"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert made.returncode == 0, made.stderr
    job_token = made.stdout.strip()  # the job's own token: Zeus's client registers its job with it
    url = f"{server.url}/zeus/{job_token}"
    first = _session(url, "0.5,0.95")  # the default batch size converges at epoch 2
    assert "batch_size 64" in first and "train failed" not in first
    second = _session(url, ",".join(["0.5"] * 10))  # never converges: the server stops it on cost
    assert "train failed" in second
    third = _session(url, "0.5")  # the script ends after one epoch, before any stop: PATCH /trials
    assert "train failed" not in third

    records = server.client(job_token).history("mnist-nightly")
    assert [r["stop_reason"] for r in records] == ["target_reached", "cost_threshold", "crashed"]
    best = records[0]
    assert best["batch_size"] == 64 and best["epochs"] == 2 and best["metrics"] == [0.5, 0.95]
    assert (best["time"], best["energy"], best["max_power"]) == (20.0, 4000.0, 300.0)  # the monitor's figures
    assert all(r["reported"] == "time energy" for r in records)
    assert 1 < records[1]["epochs"] < 10  # stopped by the cost rule, before max_epochs
    job = server.root / "mnist-nightly"
    assert not any((job / "trials").iterdir())  # each trial is one history line
    audit = subprocess.run([sys.executable, "-m", "zeus_run", "replay", str(job)], capture_output=True, text=True)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert not [line for line in server.lines if server.token in line or job_token in line]  # no token logged


def test_zeus_client_goes_on_across_a_restart_with_the_kept_token(tmp_path):
    pytest.importorskip(
        "zeus.optimizer.batch_size.client",
        reason="Zeus is not installed: scripts/install_integrations.sh installs zeus==0.16.0 into .venv",
    )
    first = ServerProcess(tmp_path / "root")  # no --token-file: the server keeps its own token in the root
    url = f"{first.wait_ready()}/zeus/{first.token}"
    assert "batch_size 64" in _session(url, "0.5,0.95")
    first.kill()
    second = ServerProcess(tmp_path / "root", port=first.port)  # started again the same way
    try:
        second.wait_ready()
        assert second.token in url  # the same token: Zeus's unchanged URL still works
        again = _session(url, "0.5,0.95")
        assert "train failed" not in again
        records = second.client().history("mnist-nightly")
        assert [r["stop_reason"] for r in records] == ["target_reached", "target_reached"]
    finally:
        second.stop()
