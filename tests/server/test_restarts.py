"""Restarts never break a client: the server keeps its own token across restarts, and a client re-reads its token
file once on a 401 before giving up."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.server.helpers import REPO, ServerProcess
from tests.server.test_security import TRIAL_SPEC
from tests.slurm_helpers import wait_for
from zeus_run.contract import Env
from zeus_run.remote import ServerClient, ServerError

SPEC = TRIAL_SPEC.replace("lease: 1", "lease: 600")
#: How long the training script may take on a loaded machine (unit: s); waited for, never asserted on.
SCRIPT_TIMEOUT_S = 600

SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, os.environ["REPO"])
    from zeus_run.train import Trial

    here = os.path.dirname(os.path.abspath(__file__))
    trial = Trial.from_env(batch_size=1, max_epochs=10, target_metric=0.9)
    for epoch in trial.epochs():
        if epoch == 2:  # in its epochs: say so, and wait while the server is killed and started again
            open(os.path.join(here, "in-epochs"), "w").close()
            while not os.path.exists(os.path.join(here, "go")):
                time.sleep(0.05)
        if not trial.report(0.95 if epoch == 2 else 0.5):
            break
    trial.close()
    print("reached" if trial.reached else "not reached", trial.epoch, flush=True)
    """
)


def test_a_server_without_a_token_file_killed_mid_trial_and_started_again_the_same_way(tmp_path: Path):
    root = tmp_path / "root"
    first = ServerProcess(root)
    first.wait_ready()
    token_file = root / ".serve.token"
    token = token_file.read_text().strip()
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    first.client().register("leases", SPEC)
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {
        **os.environ,
        "REPO": str(REPO),
        Env.SERVER: first.url,
        Env.SERVER_TOKEN_FILE: str(token_file),
        Env.SERVER_JOB: "leases",
    }
    env.pop(Env.SERVER_TOKEN, None)
    script = subprocess.Popen(
        [sys.executable, str(tmp_path / "train.py")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: (tmp_path / "in-epochs").exists() or script.poll() is not None, what="the script's epochs")
        assert script.poll() is None, script.communicate()[0]
        first.kill()  # SIGKILL: nothing cleaned up
        second = ServerProcess(root, port=first.port)  # started again the same way: no --token-file
        try:
            second.wait_ready()
            assert token_file.read_text().strip() == token  # the same token, kept
            assert "the one made before" in "".join(second.lines)
            (tmp_path / "go").touch()
            out, _ = script.communicate(timeout=SCRIPT_TIMEOUT_S)
            assert script.returncode == 0, out
            assert "reached 2" in out, out
            records = second.client().history("leases")
            assert [(r["reached"], r["epochs"], r["stop_reason"]) for r in records] == [(True, 2, "target_reached")]
            log = "".join(second.lines)
            assert token not in log and "Traceback" not in log
        finally:
            second.stop()
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()


def test_the_client_reads_its_token_file_again_once_on_a_401(tmp_path: Path, monkeypatch):
    token_file = tmp_path / "token"
    token_file.write_text("first-token-0123456789\n")
    token_file.chmod(0o600)
    first = ServerProcess(tmp_path / "root", extra=("--token-file", str(token_file)))
    first.wait_ready()
    monkeypatch.delenv(Env.SERVER_TOKEN, raising=False)
    monkeypatch.setenv(Env.SERVER, first.url)
    monkeypatch.setenv(Env.SERVER_TOKEN_FILE, str(token_file))
    client = ServerClient.from_env()
    assert client is not None and client.request("GET", "/v1/jobs") == {"jobs": []}
    first.stop()
    token_file.write_text("second-token-0123456789\n")  # the operator rotated the secret and restarted
    second = ServerProcess(tmp_path / "root", port=first.port, extra=("--token-file", str(token_file)))
    try:
        second.wait_ready()
        assert client.request("GET", "/v1/jobs") == {"jobs": []}  # 401, the file again, the new token: 200
        wrong = tmp_path / "wrong"
        wrong.write_text("wrong-token-0123456789\n")
        stale = ServerClient(second.url, "stale-token-0123456789", token_file=str(wrong))
        with pytest.raises(ServerError) as exc:  # read again once; a token that still fails is the wrong one
            stale.request("GET", "/v1/jobs")
        assert exc.value.status == 401
    finally:
        second.stop()
