"""Replay: the audit reproduces every decision; what-if never invents outcomes."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import yaml

from tests.cli.test_run_cli import zeus_in as zeus
from tests.factories import make_record
from zeus_run.engine.core import Engine, TrialRequest
from zeus_run.engine.replay import Knobs, audit, what_if, with_changes
from zeus_run.optimizer import make_optimizer
from zeus_run.records import TrialRecord
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
    return make_record(
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
    res = what_if(recs, KNOBS, recorded=KNOBS)
    assert res.unknown is None and res.recurrences == 8
    assert res.cost == res.recorded_cost
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


# -- what-if on a history with early stops and crashes -----------------------------------

# Batch size -> (epochs to target or 0 for never, seconds per epoch, crash before epoch 1).
RICH = {1: (0, 1.4, False), 2: (3, 1.0, False), 4: (2, 2.5, False), 8: (0, 0.3, True)}
# The paper's policy: it explores every batch size, so the history holds a crash, a cut and reached trials.
RICH_KNOBS = Knobs(
    (1, 2, 4, 8), 2, 0.5, 2.0, 3, OptimizerSettings.for_policy("zeus"), 0.9, True, 6, 20, max_early_stops=3
)


def live(req: TrialRequest) -> TrialRecord:
    """Like the launcher: predictive early stop at epoch boundaries, crashes with partial time."""
    bs = req.decision.batch_size
    need, tpe, crash = RICH[bs]
    base = dict(
        job="t",
        recurrence=req.recurrence,
        attempt=req.attempt,
        trial=req.trial,
        batch_size=bs,
        stage=req.decision.stage,
        max_power=100.0,
        cost_threshold=None if math.isinf(req.cost_threshold) else req.cost_threshold,
    )
    if crash:
        t = 0.7  # imports, then an OOM
        return make_record(**base, epochs=0, time=t, energy=100 * t, cost=100 * t, reached=False, stop_reason="crashed")
    metrics: list[float] = []
    prev = 0.0
    for epoch in range(1, RICH_KNOBS.max_epochs + 1):
        t = epoch * tpe
        cost = 100 * t
        metrics.append(1.0 if need and epoch >= need else 0.5)
        if need and epoch >= need:
            reason = "target_reached"
        elif epoch >= RICH_KNOBS.max_epochs:
            reason = "max_epochs"
        elif epoch >= 2 and cost + (cost - prev) > req.cost_threshold:
            reason = "cost_threshold"
        else:
            prev = cost
            continue
        return make_record(
            **base,
            epochs=epoch,
            time=t,
            energy=100 * t,
            cost=cost,
            reached=reason == "target_reached",
            stop_reason=reason,
            metrics=tuple(metrics),
        )
    raise AssertionError("unreachable")


def rich_history(n: int = 15) -> list[TrialRecord]:
    opt = make_optimizer(RICH_KNOBS.optimizer, RICH_KNOBS.batch_sizes, 2, RICH_KNOBS.seed)
    return Engine(opt, n, 20, RICH_KNOBS.beta, RICH_KNOBS.max_early_stops).run([], live)


def test_what_if_with_the_recorded_knobs_reproduces_every_trial_and_the_cost_exactly():
    recs = rich_history()
    reasons = {r.stop_reason for r in recs}
    assert {"crashed", "cost_threshold", "target_reached"} <= reasons  # the history has all of them
    res = what_if(recs, RICH_KNOBS, recorded=RICH_KNOBS)
    assert res.unknown is None and res.recurrences == 15
    assert res.cost == res.recorded_cost  # exactly: 1.000x
    key = [(r.batch_size, r.epochs, r.stop_reason, r.time, r.energy, r.cost) for r in recs]
    assert [(r.batch_size, r.epochs, r.stop_reason, r.time, r.energy, r.cost) for r in res.records] == key


def test_a_batch_size_that_crashed_replays_as_crashed():
    recs = rich_history()
    assert any(r.batch_size == 8 and r.stop_reason == "crashed" for r in recs)
    for seed in range(1, 8):
        res = what_if(recs, with_changes(RICH_KNOBS, seed=seed, eta=0.8), recorded=RICH_KNOBS)
        assert res.unknown != 8, res.unknown_reason
        assert all(r.stop_reason == "crashed" for r in res.records if r.batch_size == 8)


def test_an_outcome_the_history_cannot_supply_is_unknown_with_the_reason():
    recs = rich_history()
    cut = [r for r in recs if r.stop_reason == "cost_threshold"]
    assert cut
    bs = cut[0].batch_size
    # Keep only the cut trials of that batch size: without early stopping the replay would run them further.
    hist = [r for r in recs if r.batch_size != bs or r.stop_reason == "cost_threshold"]
    res = what_if(hist, _no_beta(RICH_KNOBS), recorded=RICH_KNOBS)
    assert res.unknown == bs
    assert f"stopped at epoch {cut[0].epochs} (cost_threshold)" in res.unknown_reason
    assert "never observed" in res.unknown_reason
    # Nothing after the unknown point was invented.
    assert all(r.recurrence < res.stopped_at or r.batch_size != bs for r in res.records)


def _no_beta(k: Knobs) -> Knobs:
    return dataclasses.replace(k, beta=None)
