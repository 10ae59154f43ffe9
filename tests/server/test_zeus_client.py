"""Zeus's own client, unchanged, against ``zeus-run serve``: three training sessions, then replay.

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


def test_three_sessions_of_zeus_batch_size_optimizer(server: ServerProcess):
    pytest.importorskip(
        "zeus.optimizer.batch_size.client",
        reason="Zeus is not installed: scripts/install_integrations.sh installs zeus==0.16.0 into .venv",
    )
    url = f"{server.url}/zeus/{server.token}"
    first = _session(url, "0.5,0.95")  # the default batch size converges at epoch 2
    assert "batch_size 64" in first and "train failed" not in first
    second = _session(url, ",".join(["0.5"] * 10))  # never converges: the server stops it on cost
    assert "train failed" in second
    third = _session(url, "0.5")  # the script ends after one epoch, before any stop: PATCH /trials
    assert "train failed" not in third

    records = server.client().history("mnist-nightly")
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
    assert not [line for line in server.lines if server.token in line]  # the token never logged
