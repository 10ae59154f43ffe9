"""Properties every batch-size policy must keep, checked on generated jobs (hypothesis).

For each policy in `zeus_run.optimizer.POLICIES` and any batch-size list, b0,
seed, knobs and sequence of trial outcomes:

* decide/observe are pure and deterministic: a decision depends only on the
  observations folded so far, and folding never modifies a state;
* replay-exact: re-folding a prefix of the observations reproduces the decision
  taken after it, and `zeus_run.engine.replay.audit` reproduces a whole engine run;
* every decision is one of the batch sizes;
* pruning never drops b0 before it has been tried: with pruning
  (``pruning_rounds >= 1``) and for ``zeus-voi``, b0 is the first trial, and
  stays next whatever else was observed before it. ``zeus`` and ``zeus-plus``
  with ``pruning_rounds: 0`` drop nothing: their bandit explores every batch
  size (b0 included) ``num_explorations`` times, in random order, as the
  reference does.
"""

from __future__ import annotations

import contextlib
import copy
import math
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zeus_run.engine.core import Engine, TrialRequest
from zeus_run.engine.replay import Knobs, audit
from zeus_run.errors import ConvergenceError
from zeus_run.optimizer import POLICIES, BatchSizeOptimizer, Observation, make_optimizer
from zeus_run.records import TrialRecord
from zeus_run.spec import OptimizerSettings

PROPERTY = settings(
    max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def jobs(draw):
    """A policy with knobs, a batch-size list with b0, a seed, and a hidden cost model per batch size."""
    policy = draw(st.sampled_from(sorted(POLICIES)))
    batch_sizes = draw(st.lists(st.integers(1, 4096), min_size=1, max_size=9, unique=True))
    b0 = draw(st.sampled_from(batch_sizes))
    knobs = {"window_size": draw(st.sampled_from([0, 0, 2, 5]))}
    if policy != "zeus-voi":
        knobs["pruning_rounds"] = draw(st.integers(0, 3))
        knobs["num_explorations"] = draw(st.integers(0, 3))
    settings_ = OptimizerSettings.for_policy(policy, **knobs)
    model = {
        b: (draw(st.floats(1.0, 1e6, allow_nan=False)), draw(st.sampled_from([0.0, 0.5, 0.9, 1.0])))
        for b in batch_sizes
    }
    model[b0] = (model[b0][0], 1.0)  # b0 converges, as zeus-run requires of it
    return settings_, tuple(batch_sizes), b0, draw(st.integers(0, 2**31 - 1)), model, draw(st.integers(0, 2**16))


def build(settings_: OptimizerSettings, batch_sizes, b0: int, seed: int) -> BatchSizeOptimizer:
    return make_optimizer(settings_, batch_sizes, b0, seed)


def outcome(model, rng: random.Random, batch_size: int) -> Observation:
    """A noisy cost; converges with the batch size's probability (a failure costs twice as much)."""
    base, p_reach = model[batch_size]
    reached = rng.random() < p_reach
    cost = base * math.exp(rng.gauss(0.0, 0.2)) * (1.0 if reached else 2.0)
    return Observation(batch_size, cost, reached)


def play(opt: BatchSizeOptimizer, model, world_seed: int, steps: int = 40):
    """Run ``steps`` decisions against the cost model; return (decisions, observations, states)."""
    rng = random.Random(world_seed)
    state = opt.initial_state()
    decisions, observations, states = [], [], [state]
    for _ in range(steps):
        d = opt.decide(state)
        obs = outcome(model, rng, d.batch_size)
        state = opt.observe(state, obs)
        decisions.append(d)
        observations.append(obs)
        states.append(state)
    return decisions, observations, states


def prunes(settings_: OptimizerSettings) -> bool:
    """Whether the policy starts from b0 by construction (pruning rounds, or zeus-voi's walk)."""
    return settings_.policy == "zeus-voi" or settings_.pruning_rounds >= 1


@PROPERTY
@given(jobs())
def test_decisions_are_batch_sizes_and_b0_is_tried_first(job):
    settings_, batch_sizes, b0, seed, model, world = job
    decisions, _, _ = play(build(settings_, batch_sizes, b0, seed), model, world)
    chosen = [d.batch_size for d in decisions]
    assert set(chosen) <= set(batch_sizes)
    assert all(d.stage in ("pruning", "explore", "thompson", "exploit") for d in decisions)
    if prunes(settings_):
        assert chosen[0] == b0
    else:  # the bandit's exploration covers every arm first
        assert b0 in chosen[: len(batch_sizes) * max(1, settings_.num_explorations)]


@PROPERTY
@given(jobs().filter(lambda job: prunes(job[0])), st.lists(st.integers(0, 8), min_size=1, max_size=6))
def test_b0_is_never_dropped_before_it_has_been_tried(job, others):
    """Whatever other batch sizes were observed first (e.g. an edited history), b0 is still next."""
    settings_, batch_sizes, b0, seed, _, _ = job
    opt = build(settings_, batch_sizes, b0, seed)
    rest = [b for b in batch_sizes if b != b0] or [b0]
    state = opt.initial_state()
    for i in others:
        b = rest[i % len(rest)]
        state = opt.observe(state, Observation(b, 10.0 + i, i % 2 == 0))
        if b == b0:
            break
        assert opt.decide(state).batch_size == b0


@PROPERTY
@given(jobs())
def test_decide_and_observe_are_pure_and_deterministic(job):
    settings_, batch_sizes, b0, seed, model, world = job
    opt = build(settings_, batch_sizes, b0, seed)
    decisions, observations, states = play(opt, model, world)
    # Same configuration, same outcomes: same decisions (nothing hidden in the optimizer object).
    again, _, _ = play(build(settings_, batch_sizes, b0, seed), model, world)
    assert again == decisions
    # Deciding twice, or observing, leaves a state as it was.
    for state, obs in zip(states, observations, strict=False):
        before = copy.deepcopy(state)
        assert opt.decide(state) == opt.decide(state)
        opt.observe(state, obs)
        assert state == before


@PROPERTY
@given(jobs())
def test_refolding_any_prefix_reproduces_the_decision(job):
    settings_, batch_sizes, b0, seed, model, world = job
    opt = build(settings_, batch_sizes, b0, seed)
    decisions, observations, states = play(opt, model, world)
    for k in range(len(decisions)):
        fresh = build(settings_, batch_sizes, b0, seed)  # as a resumed run or a replay would
        state = fresh.fold(observations[:k])
        assert state == states[k]
        assert fresh.decide(state) == decisions[k]


def execute_with(model, rng: random.Random):
    """An engine executor drawing outcomes from ``model`` (cut at the early-stop threshold like a real run)."""

    def execute(req: TrialRequest) -> TrialRecord:
        obs = outcome(model, rng, req.decision.batch_size)
        cost, reached = obs.cost, obs.reached
        if cost > req.cost_threshold:
            cost, reached = req.cost_threshold, False
        return TrialRecord(
            job="prop",
            recurrence=req.recurrence,
            attempt=req.attempt,
            trial=req.trial,
            batch_size=req.decision.batch_size,
            stage=req.decision.stage,
            epochs=1,
            time=cost / 100.0,
            energy=cost / 2.0,
            max_power=100.0,
            cost=cost,
            reached=reached,
            stop_reason="target_reached" if reached else "cost_threshold",
            cost_threshold=None if math.isinf(req.cost_threshold) else req.cost_threshold,
            detail=req.decision.detail,
        )

    return execute


@PROPERTY
@given(jobs(), st.sampled_from([None, 1.5, 2.0]))
def test_audit_reproduces_an_engine_run(job, beta):
    settings_, batch_sizes, b0, seed, model, world = job
    opt = build(settings_, batch_sizes, b0, seed)
    records: list[TrialRecord] = []
    with contextlib.suppress(ConvergenceError):  # a first recurrence that misses the target ends the run
        Engine(opt, 12, 30, beta).run([], execute_with(model, random.Random(world)), records.append)
    knobs = Knobs(batch_sizes, b0, 0.5, beta, seed, settings_, target_metric=1.0, max_tries=30)
    result = audit(records, knobs)
    assert result.divergence is None and result.checked == len(records)
