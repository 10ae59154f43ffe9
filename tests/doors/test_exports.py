"""One place saves a trial, for every door (issue 39, item 5): a trial told through any door reaches the live exports.

Every door (`window.py`: run, exec, a plain ask/tell, the `Job` API, the server's client, the callbacks' driver
under run and under ask/tell) runs one short trial of a job whose spec exports live to MLflow and to a Pushgateway.
The sinks are test doubles at the export boundary: ``import mlflow`` is `tests/fake_mlflow` (one store for every
process of the test), and the Pushgateway is an HTTP server in this process that keeps what was pushed. After the
trial, each sink must hold it: its MLflow trial run, tagged with its trial id, with the record's energy; the
Pushgateway's figures equal to the history's. ``tests/export/test_integrations.py`` does the same against a real
MLflow store and a real Pushgateway (marker ``integrations``).
"""

from __future__ import annotations

import base64
import http.server
import importlib.util
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.doors import helpers
from tests.doors.window import DOORS, SERVER_JOB, Room, server_run_dir
from tests.export.test_prometheus import parse
from tests.fake_mlflow.store import PATH as FAKE_MLFLOW
from tests.fake_mlflow.store import trial_runs
from zeus_run.errors import UsageError
from zeus_run.export import trial_id

pytestmark = [pytest.mark.xdist_group("test_exports"), pytest.mark.heavy]  # heavy: scripts/test_heavy.sh

#: A short trial: start-up, epoch and save (unit: s; `window_train.py`'s ``WINDOW_TIMES``).
TIMES = "0.1,0.1,0.1"


class Pushgateway:
    """A Pushgateway double on a free loopback port: keeps the last body pushed to each grouping key."""

    def __init__(self) -> None:
        pushed: dict[str, str] = {}
        self.pushed = pushed

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                pushed[self.path] = body
                self.send_response(200)
                self.end_headers()

            do_POST = do_PUT

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def job_metrics(self, job: str) -> dict[str, list[tuple[dict[str, str], float]]]:
        """The samples last pushed for ``job`` (one grouping key: this test's one run directory)."""
        key = base64.urlsafe_b64encode(job.encode()).decode()
        bodies = [b for path, b in self.pushed.items() if f"/job_name@base64/{key}" in path]
        assert len(bodies) == 1, sorted(self.pushed)
        return parse(bodies[0])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def gateway() -> Iterator[Pushgateway]:
    g = Pushgateway()
    yield g
    g.close()


def _room(tmp: Path, gateway: Pushgateway) -> Room:
    store = tmp / "mlflow-store.json"
    # A store inside the server's job directory: a server refuses one elsewhere (the double never writes there).
    uri = f"sqlite:///{tmp / 'root' / SERVER_JOB / 'mlflow.db'}"
    env = {"PYTHONPATH": str(FAKE_MLFLOW), "FAKE_MLFLOW_STORE": str(store), "WINDOW_TIMES": TIMES}
    return Room(tmp, f"export: {{mlflow: {{tracking_uri: '{uri}'}}, prometheus: {{push: '{gateway.url}'}}}}", env)


@pytest.mark.parametrize("door", list(DOORS))
def test_a_trial_told_through_any_door_reaches_the_live_exports(tmp_path, gateway, door):
    room = _room(tmp_path, gateway)
    record = DOORS[door](room)
    run_dir = server_run_dir(room) if door == "server client" else tmp_path / "runs"
    history = helpers.history(run_dir)
    assert record in history and record.reached, record

    runs = trial_runs(tmp_path / "mlflow-store.json")
    assert set(runs) == {trial_id(r) for r in history}, (door, sorted(runs))
    exported = runs[trial_id(record)]
    assert exported["status"] == "FINISHED" and exported["params"]["batch_size"] == str(record.batch_size)
    assert exported["metrics"]["energy_joules"][-1][0] == pytest.approx(record.energy)

    samples = gateway.job_metrics(record.job)
    trials = sum(v for _, v in samples["zeus_run_trials_total"])
    energy = sum(v for _, v in samples["zeus_run_energy_joules_total"])
    assert trials == len(history)
    assert energy == pytest.approx(sum(r.energy for r in history))


def _hide_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))


def test_ask_refuses_a_job_whose_live_export_needs_a_missing_mlflow_as_run_does(tmp_path, gateway, monkeypatch):
    from tests.doors.window import _spec
    from zeus_run.asktell import ask

    room = _room(tmp_path, gateway)
    spec = tmp_path / "job.yaml"
    spec.write_text(_spec(room))
    _hide_mlflow(monkeypatch)
    with pytest.raises(UsageError, match=r"zeus-run\[mlflow\]"):
        ask(spec)
    assert (
        not (tmp_path / "runs" / "running.json").exists()
        or "token" not in (tmp_path / "runs" / "running.json").read_text()
    )  # nothing was asked


def test_a_tell_saves_its_trial_even_where_an_export_cannot_be_made(tmp_path, gateway, monkeypatch, caplog):
    """MLflow went missing between the ask and the tell: the record is saved all the same (a tell never loses its
    record over an export), MLflow's export is a warning, and the Pushgateway still gets the trial."""
    from tests.doors.window import _spec
    from zeus_run.asktell import ask, report_epoch, tell

    room = _room(tmp_path, gateway)
    spec = tmp_path / "job.yaml"
    spec.write_text(_spec(room).replace("source: nvml", "source: estimate, watts: 100"))
    monkeypatch.setenv("PYTHONPATH", f"{FAKE_MLFLOW}:{helpers.REPO}")
    monkeypatch.setenv("FAKE_MLFLOW_STORE", str(tmp_path / "mlflow-store.json"))
    monkeypatch.syspath_prepend(str(FAKE_MLFLOW))
    a = ask(spec)
    report_epoch(a.run_dir, a.token, 1, 0.95)
    _hide_mlflow(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="zeus_run"):
        record = tell(a.run_dir, a.token, exit_code=0)
    assert helpers.history(a.run_dir) == [record] and record.reached
    assert any("saved but not exported to MLflow" in m for m in caplog.messages), caplog.messages
    assert sum(v for _, v in gateway.job_metrics(record.job)["zeus_run_trials_total"]) == 1


# -- against the real sinks (marker ``integrations``: scripts/test_integrations.sh) ------------------------------


@pytest.mark.integrations
@pytest.mark.parametrize("door", list(DOORS))
def test_a_trial_told_through_any_door_reaches_a_real_mlflow_store_and_a_real_pushgateway(tmp_path, door):
    import urllib.request

    from tests.export.services import INSTALL, pushgateway

    mlflow = pytest.importorskip("mlflow", reason=f"mlflow is not installed: {INSTALL}")
    store = tmp_path / "root" / SERVER_JOB / "mlflow.db"  # inside the server's job directory, which it requires
    uri = f"sqlite:///{store}"
    with pushgateway(tmp_path) as gateway:
        spec_extra = f"export: {{mlflow: {{tracking_uri: '{uri}'}}, prometheus: {{push: '{gateway.url}'}}}}"
        room = Room(tmp_path, spec_extra, {"WINDOW_TIMES": TIMES})
        record = DOORS[door](room)
        run_dir = server_run_dir(room) if door == "server client" else tmp_path / "runs"
        history = helpers.history(run_dir)
        with urllib.request.urlopen(gateway.url + "/metrics", timeout=10) as r:
            text = "\n".join(line for line in r.read().decode().splitlines() if line.startswith("zeus_run_"))
    samples = parse(text)
    assert sum(v for lab, v in samples["zeus_run_trials_total"] if lab["job_name"] == record.job) == len(history)
    energy = sum(v for lab, v in samples["zeus_run_energy_joules_total"] if lab["job_name"] == record.job)
    assert energy == pytest.approx(sum(r.energy for r in history))

    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("zeus-run")
    assert exp is not None, door
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    trials = [r for r in runs if r.data.tags.get("zeus_run.role") == "trial"]
    assert sorted(r.data.tags["zeus_run.trial_id"] for r in trials) == sorted(trial_id(r) for r in history)
    mine = next(r for r in trials if r.data.tags["zeus_run.trial_id"] == trial_id(record))
    assert mine.info.status == "FINISHED" and mine.data.metrics["energy_joules"] == pytest.approx(record.energy)
