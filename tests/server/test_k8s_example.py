"""The Kubernetes example (docs/server/k8s.yaml): its pieces fit together and the server's command line parses."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml

from zeus_run.cli import app
from zeus_run.contract import Env

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "server" / "k8s.yaml"


def test_the_k8s_example_has_a_server_a_service_and_a_cronjob_that_reaches_it():
    docs = {d["kind"]: d for d in yaml.safe_load_all(EXAMPLE.read_text())}
    assert {"Deployment", "Service", "CronJob", "PersistentVolumeClaim"} <= set(docs)
    server = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    argv = server["command"]
    assert argv[:2] == ["zeus-run", "serve"]
    # the command line is one `zeus-run serve` accepts (parsed by the real CLI, not run)
    group = typer.main.get_command(app)
    ctx = group.make_context("zeus-run", list(argv[1:]))
    sub = group.get_command(ctx, "serve")
    params = sub.make_context("serve", list(argv[2:]), parent=ctx).params
    assert params["token_file"] is not None and params["host"] == "0.0.0.0"
    assert docs["Deployment"]["spec"]["replicas"] == 1 and docs["Deployment"]["spec"]["strategy"]["type"] == "Recreate"
    probe = server["readinessProbe"]["httpGet"]["path"]
    assert probe == "/v1/health"
    service = docs["Service"]
    port = service["spec"]["ports"][0]["port"]
    assert port == params["port"]
    pod = docs["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in pod["env"]}
    assert set(env) <= set(Env.names())
    assert env[Env.SERVER] == f"http://{service['metadata']['name']}:{port}"
    mounts = {m["mountPath"] for m in pod["volumeMounts"]}
    assert str(Path(env[Env.SERVER_TOKEN_FILE]).parent) in mounts and str(Path(env[Env.SERVER_SPEC]).parent) in mounts
    assert str(Path(params["token_file"]).parent) in {m["mountPath"] for m in server["volumeMounts"]}
    # the training pod holds its job's own token, never the operator's
    secrets = {
        kind: {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
        for kind, spec in (
            ("server", docs["Deployment"]["spec"]["template"]["spec"]),
            ("pod", docs["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]),
        )
    }
    assert secrets["server"] and secrets["pod"] and not secrets["server"] & secrets["pod"]
