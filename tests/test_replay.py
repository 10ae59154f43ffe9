"""Replay: the audit reproduces every decision; what-if never invents outcomes."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import yaml

from tests.test_run_cli import zeus
from zeus_run.engine import Engine, TrialRequest
from zeus_run.optimizer import make_optimizer
from zeus_run.records import TrialRecord
from zeus_run.replay import Knobs, audit, what_if, with_changes
from zeus_run.spec import OptimizerSettings

# Batch size -> (epochs to target or 0 for never, seconds per epoch). Energy = 100 W x time.
TABLE = {1: (0, 1.0), 2: (2, 1.0), 4: (3, 0.8)}
KNOBS = Knobs((1, 2, 4), 2, 0.5, None, 3, OptimizerSettings(), 0.9, True, 5, 20)


def execute(req: TrialRequest) -> TrialRecord:
    bs = req.decision.batch_size
    need, tpe = TABLE[bs]
    reached = 0 < need <= KNOBS.max_epochs
    epochs = need if reached else KNOBS.max_epochs
    t = epochs * tpe
    return TrialRecord(
        job="t",
        recurrence=req.recurrence,
        attempt=req.attempt,
        trial=req.trial,
        batch_size=bs,
        stage=req.decision.stage,
        epochs=epochs,
        time=t,
        energy=100 * t,
        max_power=100.0,
        cost=0.5 * 100 * t + 0.5 * 100 * t,
        reached=reached,
        stop_reason="target_reached" if reached else "max_epochs",
        metrics=tuple(1.0 if reached and i == epochs else 0.5 for i in range(1, epochs + 1)),
        cost_threshold=None if math.isinf(req.cost_threshold) else req.cost_threshold,
    )


def recorded(n: int = 8) -> list[TrialRecord]:
    opt = make_optimizer(KNOBS.optimizer, KNOBS.batch_sizes, 2, KNOBS.seed)
    return Engine(opt, n, 20, KNOBS.beta).run([], execute)


def test_audit_reproduces_every_decision():
    recs = recorded()
    result = audit(recs, KNOBS)
    assert result.divergence is None and result.checked == len(recs)


def test_audit_finds_the_first_divergence():
    recs = recorded()
    bad = list(recs)
    bad[4] = dataclasses.replace(bad[4], batch_size=1 if bad[4].batch_size != 1 else 4)
    result = audit(bad, KNOBS)
    assert result.checked == 4
    assert result.divergence.trial == 4 and result.divergence.what == "batch size"
    assert result.divergence.replayed == recs[4].batch_size


def test_audit_detects_another_seed_or_threshold():
    recs = recorded(20)
    assert audit(recs, dataclasses.replace(KNOBS, beta=2.0)).divergence.what == "cost threshold"


def test_what_if_with_the_same_knobs_costs_the_same():
    recs = recorded()
    res = what_if(recs, KNOBS)
    assert res.unknown is None and res.recurrences == 8
    assert res.cost == pytest.approx(res.recorded_cost)
    assert [r.batch_size for r in res.records] == [r.batch_size for r in recs]
    assert all(r.kind == "replayed" for r in res.records)


def test_what_if_with_eta_one_counts_energy_only():
    recs = recorded()
    res = what_if(recs, with_changes(KNOBS, eta=1.0))
    # Same decisions (pruning costs keep their order); cost is now energy = 100 W x time.
    assert res.cost == pytest.approx(sum(r.energy for r in recs))


def test_never_observed_batch_size_is_unknown_not_invented():
    only_default = [r for r in recorded() if r.batch_size == 2]
    # Renumber as if only batch size 2 had ever run.
    hist = [dataclasses.replace(r, recurrence=i + 1, attempt=1, trial=i) for i, r in enumerate(only_default)]
    res = what_if(hist, KNOBS)
    assert res.unknown == 1 and res.stopped_at == 2  # pruning goes down to 1 next; never observed
    assert res.recurrences == 1


def test_replay_cli_audits_and_exits_1_on_divergence(tmp_path):
    recs = recorded()
    spec = {
        "batch_sizes": [1, 2, 4],
        "default_batch_size": 2,
        "eta": 0.5,
        "beta": None,
        "seed": 3,
        "optimizer": dataclasses.asdict(OptimizerSettings()),
        "target_metric": 0.9,
        "max_epochs": 5,
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    hist = tmp_path / "history.jsonl"
    hist.write_text("".join(json.dumps(r.to_json()) + "\n" for r in recs))
    ok = zeus("replay", str(tmp_path))
    assert ok.returncode == 0 and f"reproduces all {len(recs)} recorded decisions" in ok.stdout
    wi = zeus("replay", str(tmp_path), "--eta", "1.0", "--format", "json")
    assert wi.returncode == 0 and json.loads(wi.stdout)["summary"]["recurrences"] == 8
    lines = hist.read_text().splitlines()
    rec = json.loads(lines[3])
    rec["batch_size"] = 4 if rec["batch_size"] != 4 else 1
    lines[3] = json.dumps(rec)
    hist.write_text("\n".join(lines) + "\n")
    bad = zeus("replay", str(tmp_path))
    assert bad.returncode == 1 and "trial #3: batch size" in bad.stderr


def test_what_if_policy_switch_takes_the_new_policys_defaults():
    plus = with_changes(KNOBS, policy="zeus-plus")
    assert plus.optimizer.policy == "zeus-plus"
    assert (plus.optimizer.pruning_rounds, plus.optimizer.num_explorations) == (1, 1)
    tuned = dataclasses.replace(KNOBS, optimizer=OptimizerSettings(window_size=5))
    kept = with_changes(tuned, policy="zeus-plus", eta=0.9)
    assert kept.optimizer.window_size == 5 and kept.eta == 0.9
    assert with_changes(KNOBS, eta=0.9).optimizer == KNOBS.optimizer
