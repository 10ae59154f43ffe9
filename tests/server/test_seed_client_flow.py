"""The seeds' client flow end to end through the server, with the stdlib client.

Seed 001 (``zeus.optimizer.batch_size.client``): the training script calls
``get_batch_size`` (an ask), ``on_train_begin``, then ``on_evaluate`` after each
epoch; the server's answer says whether to stop, and whether the target was
reached. Here `zeus_run.train.Trial` plays that client unchanged, and
`zeus_run.remote.ServerClient` sends exact times and energies where a test
needs a decision to fall at a known epoch.
"""

from __future__ import annotations

import pytest

from tests.factories import zeus_run_cli
from zeus_run.contract import Env

SPEC = """
name: seed
command: ["python", "train.py"]
batch_sizes: [8, 16, 32]
default_batch_size: 16
target_metric: 0.9
max_epochs: 10
eta: 0.5
beta: 2.0
recurrences: 4
seed: 1
optimizer: {revision: 3}  # the seeds' flow explores; revision 4's budget would not in 4 recurrences
energy: {source: estimate, watts: 100, basis: wall-time}
"""


def test_seed_flow_with_the_stdlib_trial_helper(real_server, monkeypatch):
    """get_batch_size -> on_train_begin -> on_evaluate per epoch -> stop when the server says (target reached).

    The server is a process: the trial reaches it by its URL (``ZEUS_SERVER``), as a training script does."""
    from zeus_run.train import Trial

    server = real_server
    client = server.client()
    client.register("seed", SPEC)
    monkeypatch.setenv(Env.SERVER, server.url)
    monkeypatch.setenv(Env.SERVER_TOKEN, server.token)
    monkeypatch.setenv(Env.SERVER_JOB, "seed")
    trial = Trial.from_env(batch_size=1)  # the ask: the server chooses
    assert trial.batch_size == 16 and trial.max_epochs == 10 and trial.target_metric == 0.9
    assert trial.remote is not None and trial.managed
    seen = []
    for epoch in trial.epochs():  # on_train_begin, then one on_evaluate per epoch
        seen.append(epoch)
        if not trial.report(0.5 if epoch < 3 else 0.95):
            break
    assert seen == [1, 2, 3]
    assert trial.remote.stop_reason == "target_reached" and trial.remote.converged
    trial.close()  # tells the server: the record is in the job's history
    (rec,) = client.history("seed")
    assert rec["batch_size"] == 16 and rec["reached"] and rec["epochs"] == 3 and rec["metrics"] == [0.5, 0.5, 0.95]


def test_seed_behaviour_the_server_decides_the_early_stop(server):
    """Seed 000, ``beta_knob``: "If min_cost*beta_knob < current_cost, job will be stopped by bso server".

    The first recurrence converges at the default batch size; the next explores a
    smaller one that does not converge, and the server, not the script, stops it
    once its cost would exceed beta x the best cost (``converged: false``).
    """
    client = server.client()
    client.register("seed", SPEC)
    first = client.ask("seed")
    assert first["batch_size"] == 16
    answer = client.report("seed", first["token"], 1, 0.95, 10.0, 1000.0)
    assert answer["stop"] and answer["converged"] and answer["reason"] == "target_reached"
    best = client.finish("seed", first["token"], time_s=10.0, energy_j=1000.0)
    assert best["reached"]
    second = client.ask("seed")
    assert second["batch_size"] == 8  # pruning goes down from the default first
    threshold = second["cost_threshold"]
    assert threshold == pytest.approx(2.0 * best["cost"])
    stops = []
    for epoch in range(1, 11):
        answer = client.report("seed", second["token"], epoch, 0.5, 10.0 * epoch, 1000.0 * epoch)
        stops.append(answer["stop"])
        if answer["stop"]:
            break
    assert answer["stop"] and not answer["converged"] and answer["reason"] == "cost_threshold"
    assert 1 < len(stops) < 10  # before max_epochs: the cost rule, not the epoch limit
    rec = client.finish("seed", second["token"], time_s=10.0 * len(stops), energy_j=1000.0 * len(stops))
    assert rec["stop_reason"] == "cost_threshold" and not rec["reached"]


def test_seed_behaviour_the_concurrent_job_rule(server):
    """Seed 002, the explorer's case 2, "Concurrent job": while pruning waits on a dispatched exploration,
    another ask gets the best known batch size instead of a second exploration; and the audit passes.

    The spec allows two trials in flight (``concurrency: 2``): asks beyond it are refused (409, busy).
    """
    client = server.client()
    client.register("seed", SPEC + "concurrency: 2\n")
    first = client.ask("seed")
    client.report("seed", first["token"], 1, 0.95, 10.0, 1000.0)
    client.finish("seed", first["token"], time_s=10.0, energy_j=1000.0)
    exploring = client.ask("seed")  # pruning explores 8: dispatched, no result yet
    assert exploring["batch_size"] == 8
    concurrent = client.ask("seed")  # a second pod meanwhile
    assert concurrent["batch_size"] == 16  # the best known, not another exploration
    for ask in (concurrent, exploring):
        client.report("seed", ask["token"], 1, 0.95, 9.0, 900.0)
        client.finish("seed", ask["token"], time_s=9.0, energy_j=900.0)
    recs = client.history("seed")
    assert [r["batch_size"] for r in recs] == [16, 16, 8]  # folded in the order they came back
    audit = zeus_run_cli("replay", server.root / "seed")
    assert audit.returncode == 0, audit.stdout + audit.stderr
