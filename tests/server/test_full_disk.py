"""A full disk through the server: every route that writes a trial's figures answers it as a refusal (409), as
``/fail`` does, never a server error (500) with a traceback in its log (issue 46, item 3).

The disk is made full without root by a ``sitecustomize`` in the server's process: while the file named by
``$FULL_DISK_FLAG`` exists, zeus-run's every write (`zeus_run._fs.write_all`) fails with ENOSPC, as on a
filesystem that reports a full disk only at the write (``statvfs`` still shows free space).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.server.helpers import REPO, ServerProcess
from tests.server.test_server_jobs import demo_spec
from zeus_run.remote import ServerError

SHIM = """
import errno, os
import zeus_run._fs as _fs

_real = _fs.write_all


def write_all(fd, data):
    if os.path.exists(os.environ["FULL_DISK_FLAG"]):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return _real(fd, data)


_fs.write_all = write_all
"""


@pytest.mark.parametrize("route", ["epochs", "fail"])
def test_a_full_disk_is_answered_as_a_refusal_never_a_500(tmp_path: Path, route: str):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SHIM)
    flag = tmp_path / "full"
    env = {"PYTHONPATH": f"{shim}:{REPO}", "FULL_DISK_FLAG": str(flag)}
    server = ServerProcess(tmp_path / "root", env=env)
    try:
        client = server.client(retry_s=5.0)
        client.register("demo", demo_spec(3, 1))
        a = client.ask("demo")
        client.report("demo", a["token"], 1, 0.5, 1.0, 100.0)
        flag.touch()  # the disk is full from now on
        with pytest.raises(ServerError) as caught:
            if route == "epochs":
                client.report("demo", a["token"], 2, 0.6, 2.0, 200.0)
            else:
                client.fail("demo", a["token"], "RuntimeError: out of disk")
        assert caught.value.status in (409, 507), caught.value
        assert "free" in str(caught.value).lower(), caught.value  # it says what to do
        flag.unlink()  # freed: the trial goes on where it was
        client.report("demo", a["token"], 2, 0.6, 2.0, 200.0)
    finally:
        server.stop()
    log = "".join(server.lines)
    assert "Traceback" not in log and " 500 " not in log, log
