"""Overlapping recurrences: the decision rule, its reproducibility, the executors, and the audit of concurrent runs."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
import signal
import threading

import pytest

from tests.concurrency_helpers import (
    B0,
    BATCH_SIZES,
    MAX_EPOCHS,
    PATHS,
    Scripted,
    fifo,
    lifo,
    make_execute,
    random_pick,
    run_to_end,
    serial_reference,
)
from tests.factories import make_record
from zeus_run.engine.concurrent import Clocked, InOrder, SlotPool, slot_devices
from zeus_run.engine.core import Ledger, TrialRequest
from zeus_run.engine.position import best_known, observation_of
from zeus_run.engine.replay import Knobs, audit, what_if
from zeus_run.errors import ConvergenceError
from zeus_run.launcher.run import _signals_to
from zeus_run.optimizer import Decision, Observation, ZeusOptimizer, make_optimizer
from zeus_run.records import CONCURRENCY_FIELDS, TrialRecord
from zeus_run.spec import POLICIES, OptimizerSettings


def knobs(policy: str = "zeus", beta: float | None = 2.0, seed: int = 5, concurrency: int = 2, **kw) -> Knobs:
    return Knobs(
        BATCH_SIZES,
        B0,
        0.5,
        beta,
        seed,
        OptimizerSettings.for_policy(policy, revision=kw.get("revision", 2)),
        0.9,
        True,
        MAX_EPOCHS,
        kw.get("max_tries", 20),
        kw.get("max_early_stops"),
        concurrency,
    )


def concurrent_run(k: Knobs, pick=fifo, recurrences: int = 20, **execute_kw) -> tuple[list[TrialRecord], Scripted]:
    ex = Scripted(make_execute(**execute_kw), pick)
    return k.engine(recurrences).run([], ex), ex


# -- the decision rule ----------------------------------------------------------------


def test_while_pruning_waits_a_starting_recurrence_runs_the_best_known_batch_size():
    records, ex = concurrent_run(knobs(), fifo)
    req = ex.started
    # Both first recurrences start before anything is known: pruning's probe of b0, and b0 again.
    assert (req[0].decision.batch_size, req[0].probe, req[0].seen) == (B0, True, 0)
    assert (req[1].decision.batch_size, req[1].probe, req[1].in_flight) == (B0, False, (0,))
    assert req[1].decision.detail.startswith("concurrent: pruning waits for batch size 32 (trial #0)")
    by_trial = {r.trial: r for r in records}
    concurrent = [q for q in req.values() if q.decision.detail.startswith("concurrent")]
    assert len(concurrent) >= 5
    for q in concurrent:
        # What the engine knew when it started: the records it had seen.
        seen = records[: q.seen]
        conv: dict[int, tuple[float, int]] = {}
        for r in seen:
            if r.observed and r.reached:
                total, n = conv.get(r.batch_size, (0.0, 0))
                conv[r.batch_size] = (total + r.cost, n + 1)
        assert q.decision.batch_size == best_known(conv, B0)
        assert not q.probe and by_trial[q.trial].probe is False
        assert sum(ex.started[t].probe for t in q.in_flight) == 1  # pruning's own trial is in flight
    # The best known is not always b0: a cheaper converged batch size takes over.
    assert {q.decision.batch_size for q in concurrent} - {B0}


def test_pruning_takes_only_the_result_it_waits_for():
    opt = ZeusOptimizer(BATCH_SIZES, B0, seed=1)
    s0 = opt.initial_state()
    assert s0.pruning.expecting == B0
    # A failure of b0 from a recurrence pruning did not dispatch: the bandit learns it, pruning still waits.
    s1 = opt.observe(s0, Observation(B0, 900.0, False, probe=False))
    assert s1.pruning == s0.pruning and s1.arms[B0].count == 1
    # The same result as pruning's own trial ends the downward direction.
    s2 = opt.observe(s0, Observation(B0, 900.0, False, probe=True))
    assert s2.pruning != s0.pruning and s2.pruning.expecting == 64


def test_a_non_probe_result_that_ends_first_does_not_move_pruning():
    # LIFO: the second trial (b0 as best known) ends before pruning's probe of b0.
    records, ex = concurrent_run(knobs(), lifo, recurrences=6)
    assert records[0].trial == 1 and records[0].probe is False
    # Folding it leaves pruning waiting for trial 0: the next recurrence again runs the best known.
    nxt = ex.started[2]
    assert nxt.seen == 1 and nxt.in_flight == (0,)
    assert nxt.decision.detail.startswith("concurrent: pruning waits for batch size 32 (trial #0)")
    opt = make_optimizer(OptimizerSettings.for_policy("zeus"), BATCH_SIZES, B0, 5)
    state = opt.fold([observation_of(records[0])])
    assert state.pruning == opt.initial_state().pruning


def test_results_are_folded_in_the_order_they_end():
    k = knobs(concurrency=3)
    records, ex = concurrent_run(k, lifo, recurrences=12)
    # The history is in the order trials ended, not the order they started.
    assert [r.trial for r in records] != sorted(r.trial for r in records)
    for position, r in enumerate(records):
        req = ex.started[r.trial]
        assert req.seen <= position  # a decision never saw its own result
        # What it had seen is exactly the records that ended before it started.
        ended_before = {q.trial for q in records[: req.seen]}
        assert set(req.in_flight) == {t for t in range(r.trial) if t not in ended_before}
    # The engine's state after the run is the fold of the history in its order.
    ledger = Ledger.from_history(k.engine(12), records)
    opt = make_optimizer(k.optimizer, BATCH_SIZES, B0, k.seed)
    assert ledger.state == opt.fold([observation_of(r) for r in records if observation_of(r)])


def test_early_stop_threshold_is_beta_times_the_cheapest_recurrence_known_at_the_start():
    records, ex = concurrent_run(knobs(beta=1.5, concurrency=3), random_pick(3), recurrences=15)
    for q in ex.started.values():
        costs: dict[int, float] = {}
        done = set()
        for r in records[: q.seen]:
            if r.observed:
                costs[r.recurrence] = costs.get(r.recurrence, 0.0) + r.spent_cost
            if r.reached:
                done.add(r.recurrence)
        cheapest = min((costs[n] for n in done), default=math.inf)
        assert q.cost_threshold == pytest.approx(1.5 * cheapest) if done else math.isinf(q.cost_threshold)


def test_thompson_draws_are_distinct_for_decisions_at_the_same_observation_count_and_reproducible():
    # Decisions share an observation count when several start at once: at the start of a run
    # and when a run resumes after an interruption (here in the Thompson stage).
    k = knobs(policy="zeus", concurrency=4, seed=11)

    def run_all():
        started: dict[int, TrialRequest] = {}

        def run(history, on_record):
            ex = Scripted(make_execute(interrupt=lambda req: req.trial == 60), random_pick(7 + len(history)))
            try:
                return k.engine(80).run(history, ex, on_record)
            finally:
                started.update(ex.started)

        records, failed = run_to_end(run)
        assert not failed
        return records, started

    records, started = run_all()
    again, _ = run_all()
    assert [r.to_json() for r in records] == [r.to_json() for r in again]
    shared = 0
    for q in started.values():
        for t in q.in_flight:
            other = started[t]
            if other.observed == q.observed:
                assert other.draw != q.draw
                shared += 1
    assert shared >= 6  # both cases happened
    sampled = [q for q in started.values() if q.decision.stage in ("thompson", "explore") and q.draw > 0]
    assert len(sampled) >= 2
    # Distinct draws are distinct samples: each decision's sampled value differs.
    assert len({q.decision.detail for q in sampled}) == len(sampled)
    opt = make_optimizer(k.optimizer, BATCH_SIZES, B0, k.seed)
    streams = [[opt.rng(9, d).random() for _ in range(3)] for d in range(4)]
    assert len({tuple(s) for s in streams}) == 4  # distinct draws
    assert streams == [[opt.rng(9, d).random() for _ in range(3)] for d in range(4)]  # reproducible
    assert audit(records, k).divergence is None


def test_draw_zero_is_the_serial_generator():
    opt = ZeusOptimizer(BATCH_SIZES, B0, seed=3)
    assert opt.rng(4).random() == opt.rng(4, 0).random()
    assert opt.rng(4, 1).random() != opt.rng(4, 0).random()


def test_fallback_and_max_tries_hold_per_recurrence():
    k = knobs(beta=1.05, concurrency=3, max_early_stops=2)
    records, ex = concurrent_run(k, random_pick(5), recurrences=20, noise=0.6)
    fallbacks = [q for q in ex.started.values() if q.decision.stage == "fallback"]
    assert fallbacks, "the scenario must early-stop twice in some recurrence"
    for q in fallbacks:
        tries = [r for r in records[: q.seen] if r.recurrence == q.recurrence and r.observed]
        assert sum(r.stop_reason in ("cost_threshold", "skipped") for r in tries) >= 2
        assert math.isinf(q.cost_threshold)
    assert audit(records, k).divergence is None
    # With max_tries 2 recurrences fail: each is recorded as failed on its second try, the run goes on
    # (the others in flight included), and the audit re-derives every decision.
    k2 = knobs(beta=1.05, concurrency=3, max_tries=2)
    records, _ = concurrent_run(k2, random_pick(5), recurrences=20, noise=0.6)
    failed = {r.recurrence for r in records if r.recurrence_failed is not None}
    assert failed, "the scenario must exhaust some recurrence's two tries"
    for n in failed:
        tries = [r for r in records if r.recurrence == n and r.observed]
        assert len(tries) == 2 and not any(r.reached for r in tries)
    assert {r.recurrence for r in records} == set(range(1, 21))
    assert {r.recurrence for r in records if r.reached} | failed == set(range(1, 21))
    assert audit(records, k2).divergence is None


# -- N = 1 is the serial loop ---------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_concurrency_one_is_the_serial_loop_from_before(policy):
    for case in range(12):
        rng = random.Random(case)
        beta = rng.choice([None, 1.2, 2.0, 4.0])
        mes = rng.choice([None, 1, 2])
        # revision 1: the paper's early stop, which the reference loop implements
        k = knobs(policy, beta=beta, seed=case, concurrency=1, max_early_stops=mes, revision=1)
        execute = make_execute(
            noise=rng.choice([0.0, 0.4]),
            interrupt=lambda req, c=case: (req.trial * 31 + c) % 17 == 0,
            crash=lambda req, c=case: (req.trial * 13 + c) % 11 == 0,
        )
        engine = k.engine(25)
        new, new_err = run_to_end(lambda h, cb, e=engine, x=execute: e.run(h, x, cb))
        old, old_err = run_to_end(lambda h, cb, e=engine, x=execute: serial_reference(e, h, x, cb))
        assert [_failure_marked(r) for r in new] == [_failure_marked(r) for r in old]
        assert new_err == old_err
        assert all(not set(CONCURRENCY_FIELDS) & set(r.to_json()) for r in new)  # written as before
        assert audit(new, k).divergence is None


def _failure_marked(record: TrialRecord) -> dict:
    """A record's JSON, with whether it failed its recurrence instead of the engine's wording of why."""
    out = record.to_json()
    out["recurrence_failed"] = out.get("recurrence_failed") is not None
    return out


# -- properties over random runs ---------------------------------------------------------------


@pytest.mark.parametrize("case", range(16))
def test_random_concurrent_runs_keep_every_invariant_and_audit(case):
    rng = random.Random(1000 + case)
    n = rng.choice([2, 3, 4])
    k = knobs(
        rng.choice(POLICIES),
        beta=rng.choice([None, 1.2, 2.0]),
        seed=case,
        concurrency=n,
        max_early_stops=rng.choice([None, 1, 3]),
    )
    started: dict[int, TrialRequest] = {}
    most = 0

    def run(history, on_record):
        nonlocal most
        ex = Scripted(
            make_execute(
                noise=0.4,
                interrupt=lambda req: (req.trial * 7 + case) % 23 == 0,
                crash=lambda req: (req.trial * 5 + case) % 13 == 0,
            ),
            random_pick(case + len(history)),
        )
        try:
            return k.engine(30).run(history, ex, on_record)
        finally:
            started.update(ex.started)
            most = max(most, ex.most)

    records, failed = run_to_end(run)
    assert most <= n
    assert {r.batch_size for r in records} <= set(BATCH_SIZES)
    assert sorted(r.trial for r in records) == list(range(len(records)))  # every trial recorded once
    for q in started.values():
        assert q.decision.batch_size in BATCH_SIZES
        assert len(q.in_flight) < n
        assert sum(started[t].probe for t in q.in_flight) + q.probe <= 1  # one pruning trial at a time
        assert all(started[t].draw != q.draw for t in q.in_flight if started[t].observed == q.observed)
    if not failed:
        assert sum(r.reached for r in records) == 30
    result = audit(records, k)
    assert result.divergence is None and result.checked == len(records)


# -- the audit of a concurrent history -------------------------------------------------------------


# One xdist worker runs the whole module and its module-scoped fixture (`.ci/run`: -n 2 --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_concurrency")


@pytest.fixture(scope="module")
def concurrent_history() -> tuple[list[TrialRecord], Knobs]:
    k = knobs(concurrency=3, seed=21)
    records, _ = concurrent_run(k, random_pick(21), recurrences=40, crash=lambda req: req.trial % 9 == 4)
    return records, k


def test_audit_reproduces_a_concurrent_run(concurrent_history):
    records, k = concurrent_history
    assert any(r.in_flight for r in records) and any(r.stage == "thompson" for r in records)
    result = audit(records, k)
    assert result.divergence is None and result.checked == len(records)
    # Through JSON, as it is stored.
    stored = [TrialRecord.from_json(json.loads(json.dumps(r.to_json()))) for r in records]
    assert stored == records and audit(stored, k).divergence is None


@pytest.mark.parametrize(
    ("field", "change", "what"),
    [
        ("batch_size", lambda r: 8 if r.batch_size != 8 else 16, "batch size"),
        ("draw", lambda r: r.draw + 1, "draw"),
        ("probe", lambda r: not r.probe, "probe"),
        ("cost_threshold", lambda r: (r.cost_threshold or 1000.0) * 1.5, "cost threshold"),
    ],
)
def test_audit_finds_a_tampered_concurrent_record(concurrent_history, field, change, what):
    records, k = concurrent_history
    p = next(i for i, r in enumerate(records) if i > len(records) // 2 and r.in_flight and r.stage == "thompson")
    bad = list(records)
    bad[p] = dataclasses.replace(records[p], **{field: change(records[p])})
    result = audit(bad, k)
    assert result.divergence is not None
    assert (result.divergence.trial, result.divergence.what) == (p, what)
    assert result.divergence.replayed == getattr(records[p], field) or what in ("batch size", "cost threshold")


def test_audit_finds_a_tampered_schedule(concurrent_history):
    records, k = concurrent_history
    p = next(i for i, r in enumerate(records) if i > 10 and r.in_flight and r.seen and r.seen > 0)
    earlier = dataclasses.replace(records[p], seen=records[p].seen - 1)
    assert audit([*records[:p], earlier, *records[p + 1 :]], k).divergence is not None
    future = dataclasses.replace(records[p], seen=p + 1)  # cannot have seen its own result
    assert audit([*records[:p], future, *records[p + 1 :]], k).divergence.what == "records seen"
    lost = records[:p] + records[p + 1 :]  # a trial's record went missing
    assert audit(lost, k).divergence is not None


def test_audit_of_a_concurrent_run_interrupted_and_resumed():
    k = knobs(concurrency=3, seed=8)
    sessions: list[int] = []  # history length when each session started

    def run(history, on_record):
        sessions.append(len(history))
        ex = Scripted(make_execute(interrupt=lambda req: req.trial in (7, 19)), random_pick(len(history)))
        return k.engine(20).run(history, ex, on_record)

    records, failed = run_to_end(run)
    assert not failed and len(sessions) == 3
    sessions.append(len(records))
    for begin, end in list(itertools.pairwise(sessions))[:-1]:  # the sessions that were interrupted
        stop = next(p for p in range(begin, end) if records[p].stop_reason == "interrupted")
        # After the interruption nothing new started: the trials in flight ended, then the run returned.
        assert not [r for r in records if stop < r.seen < end]
        # The next session starts from the whole history, nothing in flight.
        first = min((r for r in records if r.seen >= end), key=lambda r: r.trial)
        assert (first.seen, first.in_flight, first.trial) == (end, (), end)
    result = audit(records, k)
    assert result.divergence is None and result.checked == len(records)


# -- the engine's loop ------------------------------------------------------------------------


def test_first_recurrence_failing_raises_after_the_trials_in_flight_end():
    paths = {8: (0, 1.0), 16: (4, 1.1), 32: (0, 1.0), 64: (6, 0.8), 128: (9, 0.7)}  # b0 never converges
    got: list[TrialRecord] = []
    ex = Scripted(make_execute(paths=paths), fifo)
    with pytest.raises(ConvergenceError, match="first recurrence"):
        knobs(concurrency=3).engine(10).run([], ex, got.append)
    assert [r.trial for r in got] == [0, 1, 2] and not ex.running  # nothing left running, all recorded


def test_after_a_crash_the_first_recurrence_may_retry_another_batch_size_without_ending_the_run():
    # Session 1: recurrence 2 (b0, while pruning waits) converges; then the launcher dies with
    # recurrence 1's probe and recurrence 3 in flight, both recorded interrupted on resume.
    k = knobs(policy="zeus-voi", concurrency=2)
    first: list[TrialRecord] = []
    ex = Scripted(make_execute(interrupt=lambda req: req.recurrence != 2), lifo)
    k.engine(20).run([], ex, first.append)
    assert [(r.recurrence, r.stop_reason) for r in first] == [
        (2, "target_reached"),
        (3, "interrupted"),
        (1, "interrupted"),
    ]
    # Session 2: recurrence 1's retry is decided by the optimizer, which has b0's cost and moves
    # on (zeus-voi probes 16); here 16 never converges. A failed try, not "b0 does not converge".
    paths = {**PATHS, 16: (0, 1.1)}
    resumed: list[TrialRecord] = []
    k.engine(20).run(first, Scripted(make_execute(paths=paths), fifo), resumed.append)
    retry = next(r for r in resumed if r.recurrence == 1)
    assert (retry.batch_size, retry.reached) == (16, False)
    assert {r.recurrence for r in first + resumed if r.reached} == set(range(1, 21))
    assert audit(first + resumed, k).divergence is None


def test_an_executor_that_returns_an_unknown_trial_is_an_error():
    class Wrong(Scripted):
        def wait_any(self):
            return dataclasses.replace(super().wait_any(), trial=99)

    with pytest.raises(ValueError, match="trial 99, which is not in flight"):
        knobs(concurrency=2).engine(3).run([], Wrong(make_execute(), fifo))


def test_a_serial_executor_runs_in_start_order_under_concurrency():
    k = knobs(concurrency=3)
    records = k.engine(10).run([], make_execute())
    scripted, _ = concurrent_run(k, fifo, recurrences=10)
    assert records == scripted  # InOrder ends trials first-in, first-out
    assert [r.trial for r in records] == list(range(len(records)))


def test_clocked_ends_trials_in_order_of_simulated_time():
    durations = {0: 5.0, 1: 1.0, 2: 3.0, 3: 0.5}

    def execute(req):
        return make_record(
            job="j",
            recurrence=1,
            attempt=1,
            trial=req.trial,
            batch_size=8,
            stage="pruning",
            epochs=1,
            time=durations[req.trial],
            energy=1.0,
            max_power=1.0,
            cost=1.0,
            reached=True,
            stop_reason="target_reached",
        )

    clock = Clocked(execute)
    for t in (0, 1, 2):
        clock.start(TrialRequest(1, 1, t, 0, Decision(8, "pruning"), math.inf))
    assert clock.wait_any().trial == 1 and clock.now == 1.0
    clock.start(TrialRequest(1, 1, 3, 0, Decision(8, "pruning"), math.inf))  # starts at 1.0, ends at 1.5
    assert [clock.wait_any().trial for _ in range(3)] == [3, 2, 0]
    assert clock.now == 5.0
    with pytest.raises(RuntimeError):
        clock.wait_any()


def test_in_order_runs_nothing_until_waited_for():
    ran: list[int] = []
    fifo_ex = InOrder(lambda req: ran.append(req.trial) or make_execute()(req))
    for t in range(2):
        fifo_ex.start(TrialRequest(1, 1, t, 0, Decision(32, "pruning"), math.inf))
    assert ran == []
    assert fifo_ex.wait_any().trial == 0 and ran == [0]


# -- running a serial executor N-wide in threads ------------------------------------------------------


def test_slot_pool_runs_trials_at_the_same_time_on_distinct_slots():
    n = 3
    barrier = threading.Barrier(n, timeout=60)  # breaks (and fails the test) unless n trials run at once
    slots: dict[int, int] = {}
    execute = make_execute()

    def on_slot(req: TrialRequest, slot: int) -> TrialRecord:
        slots[req.trial] = slot
        if req.trial < n:
            barrier.wait()
        return execute(req)

    k = knobs(concurrency=n)
    with SlotPool(on_slot, n) as pool:
        records = k.engine(12).run([], pool)
        assert pool.running == {}
    assert sorted(slots[t] for t in range(n)) == list(range(n))
    assert set(slots.values()) <= set(range(n))
    assert audit(records, k).divergence is None


def test_slot_pool_reraises_a_trial_error_and_close_returns_the_others():
    release = threading.Event()

    def on_slot(req: TrialRequest, slot: int) -> TrialRecord:
        if req.trial == 0:
            raise OSError("disk full")
        release.wait(60)
        return make_execute()(req)

    pool = SlotPool(on_slot, 2)
    for t in range(2):
        pool.start(TrialRequest(t + 1, 1, t, 0, Decision(32, "pruning"), math.inf))
    with pytest.raises(OSError, match="disk full"):
        pool.wait_any()
    assert pool.running == {1: 1}
    release.set()
    left = pool.close()
    assert [(req.trial, rec.trial) for req, rec in left] == [(1, 1)]
    with pytest.raises(RuntimeError, match="no trial in flight"):
        pool.wait_any()


def test_slot_pool_refuses_more_trials_than_slots():
    gate = threading.Event()
    pool = SlotPool(lambda req, slot: (gate.wait(60), make_execute()(req))[1], 1)
    pool.start(TrialRequest(1, 1, 0, 0, Decision(32, "pruning"), math.inf))
    with pytest.raises(RuntimeError, match="all 1 slots are busy"):
        pool.start(TrialRequest(2, 1, 1, 0, Decision(32, "pruning"), math.inf))
    gate.set()
    assert pool.wait_any().trial == 0


def test_a_signal_delivered_to_a_trial_thread_still_stops_the_trials():
    """The kernel may hand SIGINT to any thread; the launcher waiting on its trials must still act on it.

    Its Python handler runs only in the main thread, so a main thread blocked for good on
    the trials' results would never set the cancel event that ends them (a deadlock seen
    under load). A watchdog ends the wait if the handler never runs, and the test then fails.
    """
    cancel, rescued = threading.Event(), threading.Event()
    started = threading.Event()
    worker: list[int] = []

    def on_slot(req: TrialRequest, slot: int) -> TrialRecord:
        worker.append(threading.get_ident())
        started.set()
        cancel.wait()  # a trial ends only when the launcher's cancel event is set
        return make_execute()(req)

    def watchdog() -> None:
        if not cancel.wait(60):
            rescued.set()
            cancel.set()

    with _signals_to(cancel):
        pool = SlotPool(on_slot, 1)
        pool.start(TrialRequest(1, 1, 0, 0, Decision(32, "pruning"), math.inf))
        assert started.wait(60)
        threading.Thread(target=watchdog, daemon=True).start()
        signal.pthread_kill(worker[0], signal.SIGINT)  # to the trial's thread, not the main one
        assert pool.wait_any().trial == 0
    assert not rescued.is_set(), "the handler ran only after the wait ended some other way"


def test_slot_devices_split_the_visible_gpus_into_groups():
    gpus = ["0", "1", "2", "3"]
    assert slot_devices(0, gpus, 2) == ("0", "1") and slot_devices(1, gpus, 2) == ("2", "3")
    assert slot_devices(3, gpus, 1) == ("3",)
    with pytest.raises(ValueError, match=r"slot 2 needs devices 4-5, but only 4 are visible \(0, 1, 2, 3\)"):
        slot_devices(2, gpus, 2)
    with pytest.raises(ValueError, match="at least one device"):
        slot_devices(0, gpus, 0)


# -- records ------------------------------------------------------------------------------------


def test_concurrency_fields_round_trip_and_are_checked():
    rec = make_record(
        job="j",
        recurrence=2,
        attempt=1,
        trial=5,
        batch_size=32,
        stage="pruning",
        epochs=3,
        time=3.0,
        energy=300.0,
        max_power=300.0,
        cost=600.0,
        reached=True,
        stop_reason="target_reached",
    )
    assert not set(CONCURRENCY_FIELDS) & set(rec.to_json())  # a serial record is written as before
    stamped = TrialRequest(2, 1, 5, 3, Decision(32, "pruning"), math.inf, 4, (3, 4), 1, False).stamp(rec)
    data = json.loads(json.dumps(stamped.to_json()))
    assert (data["seen"], data["in_flight"], data["draw"], data["probe"]) == (4, [3, 4], 1, False)
    back = TrialRecord.from_json(data)
    assert back == stamped and observation_of(back) == Observation(32, 600.0, True, probe=False, epochs=3)
    for key, value in [("in_flight", [1, "x"]), ("in_flight", [-1]), ("in_flight", 3), ("seen", -1), ("probe", 1)]:
        with pytest.raises(ValueError, match=key):
            TrialRecord.from_json({**data, key: value})


def test_what_if_of_a_concurrent_run_replays_it_concurrently(concurrent_history):
    records, k = concurrent_history
    res = what_if(records, k, recorded=k)
    assert res.recurrences > 0 and {r.batch_size for r in res.records} <= set(BATCH_SIZES)
    assert any(r.seen is not None and r.in_flight for r in res.records)  # overlapping, as recorded
