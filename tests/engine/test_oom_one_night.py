"""One night's out-of-memory crash of the best batch size (a co-tenant on a shared GPU) does not keep it away: it
had reached the target before, so it is shut out for its night only; a second crash shuts it out for
``oom_retry_after`` recurrences with a model, then it is tried again. Every view and the what-if replay obey the same
rule.

In process, through the real engine and optimizer: a job whose every batch size's outcome is fixed, and whose
batch sizes from 128 up run out of memory on the bad nights only (a real-kind crash the engine classes as out of
memory).
"""

from __future__ import annotations

import dataclasses

from zeus_run.contract import StopReason, TrialOutcome
from zeus_run.engine.knobs import Knobs
from zeus_run.engine.memory import shut_out
from zeus_run.engine.record import Measurement, trial_record
from zeus_run.engine.replay import audit, what_if
from zeus_run.engine.request import TrialRequest
from zeus_run.records import TrialRecord
from zeus_run.spec import OptimizerSettings
from zeus_run.views.recommend import belief_of
from zeus_run.views.summary import summarize

SIZES = (32, 64, 128, 256)
#: Epochs to the target and seconds per epoch: 128 is the best, 64 next, 256 and 32 dearer.
EPOCHS = {32: 6, 64: 5, 128: 4, 256: 6}
PACE = {32: 10.0, 64: 7.0, 128: 5.0, 256: 4.5}
WATTS = 100.0
BEST = 128


def knobs(retry_after: int | None = 5, eta: float = 0.5) -> Knobs:
    return Knobs(
        batch_sizes=SIZES,
        default_batch_size=32,
        eta=eta,
        beta=None,
        seed=3,
        optimizer=OptimizerSettings(),
        target_metric=0.9,
        max_epochs=10,
        max_tries=3,
        max_early_stops=3,
        horizon=None,
        oom_retry_after=retry_after,
    )


class BadNights:
    """Runs a request: from 128 up, out of memory on ``nights``; otherwise each batch size's fixed outcome."""

    def __init__(self, k: Knobs, *nights: int) -> None:
        self.knobs, self.nights = k, nights

    def __call__(self, req: TrialRequest) -> TrialRecord:
        b = req.decision.batch_size
        if req.recurrence in self.nights and b >= BEST:
            time = 0.2
            outcome = TrialOutcome.of(
                StopReason.CRASHED,
                epochs=0,
                time=time,
                energy=WATTS * time,
                max_power=WATTS,
                cost=self.knobs.goal.trial_cost(WATTS * time, time, WATTS),
                reached=False,
                cause="MemoryError",
            )
        else:
            n = EPOCHS[b]
            time = n * PACE[b]
            outcome = TrialOutcome.of(
                StopReason.TARGET_REACHED,
                epochs=n,
                time=time,
                energy=WATTS * time,
                max_power=WATTS,
                cost=self.knobs.goal.trial_cost(WATTS * time, time, WATTS),
                reached=True,
                metrics=(0.5,) * (n - 1) + (1.0,),
            )
        return trial_record("oom", req, outcome, Measurement("estimate", True))


def live(k: Knobs, nights: int | tuple[int, ...], recurrences: int) -> list[TrialRecord]:
    bad = (nights,) if isinstance(nights, int) else nights
    return k.engine(recurrences).run([], BadNights(k, *bad))


def reached_at(records: list[TrialRecord]) -> dict[int, int]:
    return {r.recurrence: r.batch_size for r in records if r.reached}


def first_bad_night(k: Knobs) -> int:
    """A night the job runs the best batch size, after two runs of it (so its one bad night hits it)."""
    quiet = reached_at(live(k, 10**6, 20))
    best = [n for n in sorted(quiet) if quiet[n] == BEST]
    return next(n for n in best[2:] if n - 1 in best)


def test_a_one_night_oom_of_the_best_batch_size_does_not_keep_it_away_for_ever():
    k = knobs()
    night = first_bad_night(k)
    records = live(k, night, night + 8)
    crash = next(r for r in records if r.oom)
    assert (crash.recurrence, crash.batch_size, crash.oom_retry_after) == (night, BEST, 5)
    got = reached_at(records)
    assert got[night] < BEST  # that night ends with a model below it
    # It had reached the target before: the machine is the likelier cause. Nothing is shut out after that night,
    # and the job goes back to it.
    end = max(i for i, r in enumerate(records) if r.recurrence == night)
    assert shut_out(records[: end + 1]).ceiling is None
    back = [n for n in range(night + 1, night + 9) if got[n] == BEST]
    assert back and back[0] <= night + 3 and len(back) >= 5, got
    assert audit(records, k).divergence is None  # the rule is a pure fold of the records


def test_a_second_oom_shuts_it_out_for_oom_retry_after_recurrences_then_it_is_tried_again():
    k = knobs()
    night = first_bad_night(k)
    records = live(k, (night, night + 1), night + 12)
    assert sorted({r.recurrence for r in records if r.oom}) == [night, night + 1]
    got = reached_at(records)
    # The second crash: shut out for the 5 recurrences with a model after it.
    assert all(got[n] < BEST for n in range(night, night + 7)), got
    back = [n for n in range(night + 7, night + 13) if got[n] == BEST]
    assert back and back[0] <= night + 8, got
    assert audit(records, k).divergence is None


def test_a_history_recorded_before_the_rule_keeps_its_ban_and_replays_as_recorded():
    k = knobs(retry_after=None)  # as an older zeus-run recorded it: no stamp on the crash
    night = first_bad_night(k)
    records = live(k, night, night + 12)
    assert next(r for r in records if r.oom).oom_retry_after is None
    assert all(b < BEST for n, b in reached_at(records).items() if n >= night)
    assert audit(records, knobs()).divergence is None  # whatever the knobs say now: the records decide


def test_while_the_best_batch_size_is_shut_out_no_view_recommends_it():
    k = knobs()
    night = first_bad_night(k)
    records = live(k, (night, night + 1), night + 4)  # three recurrences into the shut-out
    assert shut_out(records).ceiling == BEST
    belief = belief_of(records, k)
    assert belief.batch_size is not None and belief.batch_size < BEST  # belief.json's leader obeys the ceiling
    s = summarize(records, 32, belief=belief)
    assert s.recommendation is not None and s.recommendation.batch_size < BEST
    assert [x.batch_size for x in s.shut_out] == [BEST] and s.shut_out[0].since == night + 1
    assert s.shut_out[0].left == 2
    assert s.shut_out_of(256) is s.shut_out[0] and s.shut_out_of(64) is None
    note = s.recommendation.note or ""
    assert f"batch size {BEST} has a lower mean" in note and f"recurrence {night + 1}" in note, note
    if belief.batch_size != s.recommendation.batch_size:  # the line getting-started.md promises
        assert f"the optimizer now favours batch size {belief.batch_size}" in note, note
    # What the engine decides next is what the views recommend instead of 128: both below it.
    ledger_next = k.engine(night + 5).run(records, BadNights(k, night, night + 1))[-1]
    assert ledger_next.batch_size < BEST


def test_the_what_if_replay_obeys_the_same_rule():
    k = knobs()
    night = first_bad_night(k)
    records = live(k, (night, night + 1), night + 12)
    out = what_if(records, dataclasses.replace(k, eta=1.0), recorded=k)
    assert out.unknown is None, out.unknown_reason
    replayed = out.records
    assert any(r.oom for r in replayed)  # the recorded crash happens again in the replay, and is one
    # Every replayed decision obeys the shut-outs of the replayed records before it (and its own night's crash).
    for i, r in enumerate(replayed):
        ceiling = shut_out(replayed[:i]).ceiling
        assert ceiling is None or r.batch_size < ceiling, (i, r.recurrence, r.batch_size, ceiling)
        same_night = [x.batch_size for x in replayed[:i] if x.recurrence == r.recurrence and x.oom]
        assert not same_night or r.batch_size < min(same_night), (i, r.batch_size, same_night)
