"""Specs registered through the server: changed as `zeus-run run` lets them change, and naming only files inside
the job (or an --allow-path directory)."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from tests.server.helpers import ServerProcess
from tests.server.test_security import raw
from zeus_run.door.opening import choose_run_dir
from zeus_run.errors import RunDirError
from zeus_run.remote import ServerError
from zeus_run.rundir.store import SPEC_NAME
from zeus_run.spec import parse_spec

BASE = {
    "name": "job",
    "command": ["python", "train.py", "--bs", "{batch_size}"],
    "batch_sizes": [8, 16],
    "default_batch_size": 16,
    "target_metric": 0.9,
    "recurrences": 1,
    "lease": 600,
    "energy": {"source": "estimate", "watts": 100, "basis": "wall-time"},
}

#: (change, the fields the answer names): each applied or refused as `run` would on the same run directory.
CHANGES = [
    ({"recurrences": 3}, ["recurrences"]),
    ({"lease": 30}, ["lease"]),
    ({"command": ["python", "train2.py", "--bs", "{batch_size}"]}, ["command"]),
    ({"accounting": {"carbon_g_per_kwh": 300}}, ["accounting.carbon_g_per_kwh"]),
    ({"export": {"prometheus": {"push": "http://pushgateway:9091"}}}, ["export.prometheus"]),
    ({"eta": 0.7}, ["eta"]),  # a decision setting: `run` needs --force
    ({"batch_sizes": [8, 16, 32]}, ["batch_sizes"]),  # the same
]


def one_trial(client) -> None:
    """Give the job a history: one trial that reaches the target."""
    asked = client.ask("job")
    client.report("job", asked["token"], 1, 0.95, 1.0, 10.0)
    client.finish("job", asked["token"], 1.0, 10.0)


@pytest.mark.parametrize(("change", "fields"), CHANGES, ids=[next(iter(c)) for c, _ in CHANGES])
def test_a_changed_spec_is_applied_or_refused_exactly_as_run_would(server, change, fields):
    client = server.client()
    client.register("job", BASE)
    one_trial(client)
    run_dir = server.root / "job"
    new = {**BASE, **change}
    try:  # what `zeus-run run` decides on this run directory, asked before the server changes anything
        choose_run_dir(parse_spec(yaml.safe_dump(new), source=run_dir / SPEC_NAME), run_dir, new=False, force=False)
        run_resumes = True
    except RunDirError:
        run_resumes = False
    before = (run_dir / SPEC_NAME).read_text()
    try:
        answer = client.register("job", new)
    except ServerError as exc:
        assert not run_resumes, f"run would resume, the server refused: {exc}"
        assert (exc.status, exc.code) == (409, "spec_conflict")
        assert exc.field == f"body.spec.{fields[0]}" and fields[0] in str(exc) and "--force" in str(exc)
        assert (run_dir / SPEC_NAME).read_text() == before  # nothing changed
        return
    assert run_resumes, f"run would need --force, the server applied {answer['changed']}"
    assert answer["changed"] == fields and not answer["created"]
    stored = yaml.safe_load((run_dir / SPEC_NAME).read_text())
    for key, value in change.items():
        assert stored[key] == value or all(stored[key][k] == v for k, v in value.items())
    assert client.register("job", new)["changed"] == []  # the same again: nothing to change
    if "recurrences" in change:
        assert client.ask("job")["recurrence"] == 2  # before: "All 1 recurrences are done"
    if "lease" in change:
        assert client.register("job", {**new, "recurrences": 2})["changed"] == ["recurrences"]
        assert client.ask("job")["lease_s"] == 30


def test_a_job_recorded_under_an_older_revision_keeps_it_when_the_spec_leaves_it_at_its_default(server):
    """As `zeus-run run` resumes it (`zeus_run.rundir.resume.keep_recorded_revision`): an upgrade's new default
    revision changes nothing; naming another revision is a conflict."""
    client = server.client()
    client.register("job", {**BASE, "optimizer": {"policy": "zeus-voi", "revision": 4}})
    one_trial(client)
    answer = client.register("job", BASE)  # the default revision, not named
    assert answer["changed"] == [] and answer["spec"]["optimizer"]["revision"] == 4
    assert yaml.safe_load((server.root / "job" / SPEC_NAME).read_text())["optimizer"]["revision"] == 4
    with pytest.raises(ServerError) as refused:
        client.register("job", {**BASE, "optimizer": {"policy": "zeus-voi", "revision": 5}})
    assert (refused.value.status, refused.value.code) == (409, "spec_conflict")
    assert "optimizer.revision: 4 -> 5" in str(refused.value)


def test_a_spec_that_names_a_file_outside_the_job_gets_422_naming_the_field(server, tmp_path):
    client = server.client()
    client.register("job", BASE)
    job_dir = server.root / "job"
    os.symlink("/etc/hosts", job_dir / "link.csv")
    refused = {
        "absolute": ({"accounting": {"carbon_g_per_kwh": "/etc/passwd"}}, "accounting.carbon_g_per_kwh"),
        "dot-dot": ({"accounting": {"price_per_kwh": "../other/prices.csv"}}, "accounting.price_per_kwh"),
        "link": ({"accounting": {"carbon_g_per_kwh": "link.csv"}}, "accounting.carbon_g_per_kwh"),
        "export": (
            {"export": {"mlflow": {"tracking_uri": "sqlite:////var/lib/mlflow.db"}}},
            "export.mlflow.tracking_uri",
        ),
        "script": ({"command": ["python", "/opt/elsewhere/train.py"]}, "command[1]"),
    }
    for case, (change, field) in refused.items():
        status, body = raw(server, "PUT", "/v1/jobs/job", json.dumps({"spec": {**BASE, **change}}).encode())
        assert (status, body["code"], body["field"]) == (422, "path_not_allowed", f"body.spec.{field}"), case
        assert str(server.root) not in body["error"]
    linked = {**BASE, "accounting": {"carbon_g_per_kwh": "link.csv"}}
    assert "symbolic link" in raw(server, "PUT", "/v1/jobs/job", json.dumps({"spec": linked}).encode())[1]["error"]
    (job_dir / "grid.csv").write_text("2026-01-01T00:00:00Z,300\n")
    inside = {**BASE, "accounting": {"carbon_g_per_kwh": "grid.csv"}}  # relative: inside the job
    assert client.register("job", inside)["changed"] == ["accounting.carbon_g_per_kwh"]


def test_allow_path_lets_a_spec_name_files_in_that_directory(tmp_path):
    allowed = tmp_path / "grid-data"
    allowed.mkdir()
    proc = ServerProcess(tmp_path / "root", extra=("--allow-path", str(allowed), "--allow-path", str(tmp_path / "x")))
    try:
        proc.wait_ready()
        client = proc.client()
        (allowed / "grid.csv").write_text("2026-01-01T00:00:00Z,300\n")
        spec = {**BASE, "accounting": {"carbon_g_per_kwh": str(allowed / "grid.csv")}}
        assert client.register("job", spec)["created"]
        with pytest.raises(ServerError) as exc:
            client.register("job", {**BASE, "accounting": {"carbon_g_per_kwh": str(tmp_path / "grid.csv")}})
        assert exc.value.code == "path_not_allowed"
    finally:
        proc.stop()


def test_a_spec_that_runs_registers_as_it_is_and_leaves_a_launchers_stored_spec_alone(server, tmp_path):
    client = server.client()
    runnable = {**BASE, "workdir": ".", "run_dir": "runs/elsewhere"}
    answer = client.register("job", runnable)  # a new job: `workdir` and `run_dir` are ignored, not refused
    assert answer["created"] is True
    assert not (server.root / "runs").exists() and not (server.root / "job" / "runs").exists()
    # A job whose run directory a launcher (`run`) also uses: its stored spec is not rewritten.
    stored = server.root / "job" / SPEC_NAME
    mine = yaml.safe_load(stored.read_text())
    mine["workdir"] = str(tmp_path)
    stored.write_text(yaml.safe_dump(mine, sort_keys=False))
    before = stored.read_bytes()
    again = client.register("job", {**runnable, "workdir": "/somewhere/else"})
    assert again["changed"] == [] and stored.read_bytes() == before
    # A setting that does change is applied; the launcher's workdir stays, the spec it replaces is kept.
    changed = client.register("job", {**runnable, "recurrences": 4})
    assert changed["changed"] == ["recurrences"]
    now = yaml.safe_load(stored.read_text())
    assert now["workdir"] == str(tmp_path) and now["recurrences"] == 4
    assert (server.root / "job" / "spec.1.yaml").read_bytes() == before


def test_serve_register_sends_the_spec_file_as_written(real_server, tmp_path):
    from tests.cli.test_run_cli import zeus

    server = real_server  # the command connects by URL: a real server's

    spec = tmp_path / "mnist.yaml"
    spec.write_text(yaml.safe_dump({**BASE, "name": "mnist", "workdir": "."}, sort_keys=False))
    token = tmp_path / "operator.token"
    token.write_text(server.token)
    r = zeus("serve", "register", str(spec), "--server", server.url, "--token-file", str(token))
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    assert answer["job"] == "mnist" and answer["created"] is True and answer["job_token"].startswith("zrj_")
    client = server.client()
    asked = client.ask("mnist")
    client.report("mnist", asked["token"], 1, 0.95, 1.0, 10.0)
    client.finish("mnist", asked["token"], 1.0, 10.0)
    spec.write_text(yaml.safe_dump({**BASE, "name": "mnist", "eta": 0.9}, sort_keys=False))
    r = zeus("serve", "register", str(spec), "--server", server.url, "--token-file", str(token))
    assert r.returncode == 2 and "HTTP 409 (spec_conflict" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) <= 3, r.stderr


def test_a_pods_refused_registration_is_one_line_not_a_traceback(real_server, tmp_path):
    import subprocess
    import sys

    server = real_server  # the pod connects by URL: a real server's

    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({**BASE, "eta": 7}, sort_keys=False))  # invalid: eta is in [0, 1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZEUS_") and k != "PYTHONUNBUFFERED"}
    env.update(
        ZEUS_SERVER=server.url, ZEUS_SERVER_TOKEN=server.token, ZEUS_SERVER_JOB="job", ZEUS_SERVER_SPEC=str(spec)
    )
    code = "from zeus_run.train import Trial; Trial.from_env(); print('asked')"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "asked" not in r.stdout
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "refused job 'job' from ZEUS_SERVER_SPEC" in lines[0] and "HTTP 422" in lines[0] and "eta" in lines[0]
    spec.write_text("not: [valid")  # unreadable as a spec: the server says so, in one line too
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1, r.stderr


def test_a_warm_start_outside_the_servers_root_is_refused_and_another_job_of_it_is_not(server, tmp_path):
    client = server.client()
    client.register("job", BASE)
    one_trial(client)
    outside = tmp_path / "elsewhere" / "job"  # a run directory of the same job, outside the root
    outside.mkdir(parents=True)
    for name in ("spec.yaml", "history.jsonl"):
        (outside / name).write_bytes((server.root / "job" / name).read_bytes())
    for warm in (str(outside), "../../elsewhere/job", "../.deleted"):
        with pytest.raises(ServerError) as refused:
            client.register("job2", {**BASE, "name": "job2", "optimizer": {"warm_from": warm}})
        assert refused.value.status == 422 and refused.value.code == "path_not_allowed", warm
        assert refused.value.field == "body.spec.optimizer.warm_from"
        assert not (server.root / "job2" / "spec.yaml").exists()
    answer = client.register("job2", {**BASE, "name": "job2", "optimizer": {"warm_from": "../job"}})
    stored = yaml.safe_load((server.root / "job2" / SPEC_NAME).read_text())
    assert answer["created"] is True and stored["optimizer"]["warm_from"] == str(server.root / "job")
