"""The real Slurm that tests marked ``slurm`` run against: a cluster named explicitly by ``ZEUS_SLURM_CONF``.

`slurm_cluster` (session fixture, made visible to all tests by conftest.py)
points the Slurm commands at the cluster whose slurm.conf ``ZEUS_SLURM_CONF``
names (``SLURM_CONF`` for the session), and skips, with the reason and the
command that fixes it, when none is named, the client is not installed, or no
node is up. Tests never go looking for a cluster at a well-known path: one left
there by someone else may vanish mid-run. .ci/run starts this checkout's own dev
cluster (scripts/slurm_dev.sh, its own directory, ports and munged) and names it.

Several test sessions may share the cluster: tests use unique job names and
only ever look at (and cancel) their own jobs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from zeus_run.slurm import JobInfo, query

#: The variable that names the cluster the tests may use (its slurm.conf).
CONF_VARIABLE = "ZEUS_SLURM_CONF"
START_HINT = (
    "start this checkout's dev cluster with `scripts/slurm_dev.sh start 2` (as root; installs Slurm with apt-get "
    f"if missing), then `export {CONF_VARIABLE}=$(scripts/slurm_dev.sh conf)`"
)
UP_STATES = ("idle", "mix", "alloc", "comp")

#: Generous: the machine running the tests may be busy.
WAIT_S = 120.0


@dataclass(frozen=True)
class SlurmCluster:
    """The dev cluster as the tests found it.

    Attributes:
        conf: Its slurm.conf (exported as ``SLURM_CONF`` for the session).
        nodes: Names of the nodes that are up.
        gpus: Fake GPUs per up node (from its Gres).
    """

    conf: Path
    nodes: tuple[str, ...]
    gpus: dict[str, int]


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """The running dev cluster, or a skip that says why there is none."""
    missing = [c for c in ("sinfo", "sbatch", "squeue", "scancel") if shutil.which(c) is None]
    if missing:
        pytest.skip(f"Slurm client commands missing ({', '.join(missing)}); {START_HINT}")
    named = os.environ.get(CONF_VARIABLE, "")
    if not named:
        pytest.skip(f"no Slurm cluster named ({CONF_VARIABLE} is not set); {START_HINT}")
    conf = Path(named)
    if not conf.is_file():
        pytest.skip(f"{CONF_VARIABLE}={named} does not exist; {START_HINT}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(conf))
        try:
            proc = subprocess.run(
                ["sinfo", "--noheader", "--Node", "--format=%N|%t|%G"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.skip(f"sinfo did not answer within 30 s: the dev cluster is not running; {START_HINT}")
        if proc.returncode != 0:
            pytest.skip(f"sinfo failed ({proc.stderr.strip()}): the dev cluster is not running; {START_HINT}")
        nodes: list[str] = []
        gpus: dict[str, int] = {}
        for line in proc.stdout.splitlines():
            name, state, gres = line.split("|")
            if state.rstrip("*~#!%$@^-") in UP_STATES and name not in nodes:
                nodes.append(name)
                gpus[name] = _gpu_count(gres)
        if not nodes:
            pytest.skip(f"no Slurm node is up:\n{proc.stdout}; restart the dev cluster: {START_HINT}")
        yield SlurmCluster(conf=conf, nodes=tuple(nodes), gpus=gpus)


def _gpu_count(gres: str) -> int:
    """GPUs in a Gres string such as ``gpu:2`` or ``gpu:a100:2(S:0)``."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def unique(prefix: str = "zt") -> str:
    """A job name no other test (or test session) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(check: Callable[[], object], timeout: float = WAIT_S, what: str = "condition") -> object:
    """Poll ``check`` every 0.2 s until it returns something truthy; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.2)


def wait_final(job_id: str, timeout: float = WAIT_S) -> JobInfo:
    """The job's info once it is in a final state (fails the test if it vanishes first)."""
    seen: list[JobInfo] = []

    def final() -> JobInfo | None:
        info = query([job_id]).get(job_id)
        if info is None:
            last = seen[-1].state if seen else "never seen"
            pytest.fail(f"job {job_id} left squeue before a final state was read (last: {last})")
        seen.append(info)
        return info if info.final else None

    result = wait_for(final, timeout, f"job {job_id} to end")
    assert isinstance(result, JobInfo)
    return result


def wait_file(path: Path, timeout: float = WAIT_S) -> str:
    """The text of ``path`` once it exists and is not empty."""

    def read() -> str:
        try:
            return path.read_text()
        except FileNotFoundError:
            return ""

    text = wait_for(read, timeout, f"{path} to be written")
    assert isinstance(text, str)
    return text
