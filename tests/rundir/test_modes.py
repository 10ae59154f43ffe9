"""Files that stay yours: under ``umask 000`` zeus-run's ``run`` and ``serve`` work, and nothing they create is
writable by other users (every directory and file is created with an explicit mode).

Real processes, each started with ``umask 000`` (and without PYTHONUNBUFFERED).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_run_cli import spec_text


def world_writable(top: Path) -> list[str]:
    """Every directory and file under ``top`` (``top`` included) that other users may write."""
    out = []
    for here, dirs, files in os.walk(top):
        for name in [".", *dirs, *files]:
            p = Path(here) / name
            st = os.lstat(p)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & stat.S_IWOTH:
                out.append(f"{p.relative_to(top.parent)} {stat.filemode(st.st_mode)}")
    return out


def under_umask_000(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.run(
        [sys.executable, "-m", "zeus_run", *args],
        cwd=cwd,
        env=env,
        umask=0,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_run_under_umask_000_works_and_leaves_nothing_world_writable(write_spec, tmp_path):
    spec = write_spec(
        spec_text(body="recurrences: 2\n")
        .replace("recurrences: 1\n", "")
        .replace("run_dir: runs", "run_dir: out/nightly/runs")
    )
    r = under_umask_000("run", str(spec), "--no-output", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "nightly" / "runs" / "history.jsonl").is_file()
    assert world_writable(tmp_path / "out") == []
    r = under_umask_000("run", str(spec), "--no-output", "--next", cwd=tmp_path)  # and again: it is still ours
    assert r.returncode == 0, r.stderr
    assert world_writable(tmp_path / "out") == []


def test_serve_under_umask_000_works_and_leaves_nothing_world_writable(tmp_path):
    pytest.importorskip("fastapi")
    from tests.server.helpers import ServerProcess
    from tests.server.test_specs import BASE, one_trial

    root = tmp_path / "srv" / "root"
    server = ServerProcess(root, umask=0)
    try:
        client = server.client()
        answer = client.register("job", BASE)  # refused with 409 when the job's directory came out world-writable
        assert answer["created"] is True
        one_trial(client)
        assert [r["reached"] for r in client.history("job")] == [True]
    finally:
        server.stop()
    assert world_writable(tmp_path / "srv") == []


def test_a_server_root_every_user_may_write_is_refused_naming_the_fix(tmp_path):
    pytest.importorskip("fastapi")
    from tests.server.helpers import ServerProcess

    root = tmp_path / "root"
    root.mkdir()
    root.chmod(0o777)  # as zeus-run made it under umask 000 before it set modes itself
    server = ServerProcess(root)
    assert server.exit_code() == 2
    said = "".join(server.lines)
    assert "writable by every user" in said and "chmod o-w" in said and "Traceback" not in said, said
    assert not (root / ".serve.tokens.json").exists()
