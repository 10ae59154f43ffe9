"""Shared fixtures: paths to the shared traces and small helpers for writing specs."""

from __future__ import annotations

import os
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
#: The traces (../shared/traces, or ZEUS_RUN_TRACES where a checkout has none beside it, e.g. a worktree).
TRACES = Path(os.environ.get("ZEUS_RUN_TRACES") or REPO.parent / "shared" / "traces")
SCRIPTS = Path(__file__).resolve().parent / "scripts"

# NOTE: the suite never reads this machine's RAPL counters (`energy.source: auto` would measure
# them where readable, making results depend on the host); RAPL tests point the variable at a
# fake tree. Set here, before any test starts a subprocess, so agents inherit it.
os.environ["ZEUS_RUN_POWERCAP_ROOT"] = str(Path(tempfile.mkdtemp(prefix="zeus-run-tests-")) / "no-powercap")
# NOTE: users' machines, cron and Slurm do not set PYTHONUNBUFFERED; some development machines set it
# for every process, which hides a script's buffered output (issue 26). The suite runs without it:
# dropped here, before any test (or session fixture) runs zeus-run in-process or starts a subprocess.
os.environ.pop("PYTHONUNBUFFERED", None)


def _start_reaper() -> None:
    """Mark every process of this run (``ZEUS_RUN_TEST_SESSION``, inherited) and start `tests/reaper.py`, which ends
    the marked ones once this pytest process is gone, however it ended: an interrupted run leaves no process behind.
    Once per run: xdist's workers inherit the mark (and are among what is ended)."""
    import subprocess
    import uuid

    from tests.reaper import MARK_VAR

    if os.environ.get(MARK_VAR) or not sys.platform.startswith("linux"):
        return
    mark = uuid.uuid4().hex
    subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve().parent / "reaper.py"), str(os.getpid()), mark],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C or a kill of the run's process group leaves it to do its work
        env={k: v for k, v in os.environ.items() if k != MARK_VAR},
    )
    os.environ[MARK_VAR] = mark


_start_reaper()


@pytest.fixture
def traces_dir() -> Path:
    """The Zeus paper's traces (../shared/traces); skip if this checkout has none beside it."""
    if not (TRACES / "summary_train.csv").exists():
        pytest.skip("../shared/traces is not beside this checkout")
    return TRACES


@pytest.fixture
def write_spec(tmp_path: Path):
    """Write a job spec YAML into tmp_path and return its path."""

    def write(body: str, name: str = "job.yaml") -> Path:
        p = tmp_path / name
        p.write_text(textwrap.dedent(body))
        return p

    return write


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup``: each ``xdist_group`` in one worker, and the groups first.

    pytest-xdist names a test's group in its node id (``...@group``) by setting ``item._nodeid``, which pytest 9
    no longer reads (the node id is derived from ``item._id``): every group was split over both workers, and each
    module-scoped fixture of a grouped module (the doors' runs, the Slurm cluster's jobs) set up in both. Where
    xdist's name did not take, it is set here; a test that uses a module-scoped fixture joins its module's group
    (`_module_fixture_group`). Then the groups (minutes of real processes each, one worker's) go
    first and the single tests after them, so that the two workers end together rather than one finishing a
    large group alone (the longest work first)."""
    if not getattr(config.option, "loadgroup", False):  # set in xdist's workers under --dist loadgroup
        return
    grouped: list[pytest.Item] = []
    single: list[pytest.Item] = []
    for item in items:
        names = sorted(
            {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
        ) or _module_fixture_group(item)
        if not names:
            single.append(item)
            continue
        grouped.append(item)
        suffix = "@" + "_".join(names)
        if not item.nodeid.endswith(suffix) and hasattr(item, "_id"):
            from _pytest.nodeid import coerce_node_id  # pytest 9's node id (xdist's rename did not reach it)

            item._id = coerce_node_id(item.nodeid + suffix)
    items[:] = grouped + single


def _module_fixture_group(item: pytest.Item) -> list[str]:
    """A test that uses a module-scoped fixture (a real server, a module's shared runs) runs in its module's group,
    so that the fixture is set up in one worker, once."""
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(info, "names_closure", ()):
        defs = info.name2fixturedefs.get(name) if info is not None else None
        if defs and defs[-1].scope == "module":
            return [item.nodeid.split("::")[0].removesuffix(".py").replace("/", ".")]
    return []


PYTHON = sys.executable
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/fake_nvml.py

from tests.slurm_helpers import slurm_cluster, unique  # noqa: E402, F401  (`slurm_cluster`: the `slurm` tests' fixture)


@pytest.fixture(scope="session")
def timeout_job(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """A probe job over a one-minute Slurm limit (tests/test_slurm_cluster.py).

    slurmctld checks time limits every 30 s, so it ends 60 to 90 s after it starts.
    """
    from tests.slurm.test_slurm_cluster import Probe  # the test module imports this one
    from zeus_run.slurm import SlurmSettings, cancel, query, submit

    request.getfixturevalue("slurm_cluster")  # or skip

    probe = Probe(tmp_path_factory.mktemp("timeout"), "job")
    job_id = submit(probe.job(unique("zt-timeout"), wait_s=600), SlurmSettings(gpus=0, time="1"))
    final: dict[str, Any] = {}

    def watch() -> None:
        """Note the job's final state while squeue still shows it (the dev cluster forgets ended jobs after 30 s)."""
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                info = query([job_id]).get(job_id)
            except Exception:  # SlurmError, or a timeout on a loaded machine: keep watching
                info = None
            if info is not None and info.final:
                final["info"] = info
                return
            time.sleep(2)

    threading.Thread(target=watch, name="timeout-job watcher", daemon=True).start()
    yield job_id, probe, final
    cancel([job_id])


@pytest.fixture(scope="session")
def over_time(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    """A zeus-run launcher whose only trial outlives its one-minute Slurm limit (infra_retries 0)."""
    from tests.executors.test_slurm_executor import spec_text
    from tests.launcher.test_faults import launch

    request.getfixturevalue("slurm_cluster")  # or skip

    root = tmp_path_factory.mktemp("over-time")
    spec = root / "job.yaml"
    text = spec_text(needs="2:3", epoch_time=60.0, recurrences=1, gpus=0, time="1", infra_retries=0)
    spec.write_text(text.replace("run_dir: runs", f"run_dir: {root / 'runs'}"))
    proc = launch(spec)
    yield root / "runs", proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session", autouse=True)
def _slurm_time_limit_jobs_early(request: pytest.FixtureRequest) -> None:
    """Start the two time-limit jobs when the session starts, if any `slurm` test was selected and the dev
    cluster is up, so that their wait overlaps the whole suite rather than adding to it."""
    if not any(item.get_closest_marker("slurm") for item in request.session.items):
        return
    try:
        request.getfixturevalue("timeout_job")
        request.getfixturevalue("over_time")
    except pytest.skip.Exception:  # no dev cluster: the slurm tests skip, saying why
        return
