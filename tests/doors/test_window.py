"""One measurement window, whatever the door (issue 39, item 3).

The same trial (`window.py`, `window_train.py`: 1.5 s of start-up before it reads its trial, three epochs, 0.5 s
of saving after its target) through every door, on the NVML double drawing a constant power: ``run``, ``exec``,
the script measuring itself under a plain ask/tell, the `Job` API, the server's client, and what the framework
callbacks do (`zeus_run.integrations._driver.Driver`) under ``run`` and under ask/tell. Each door's record (its
``energy`` with ``after_energy``: up to the target and after it) must hold what the GPU drew over the trial's
span, the script's process from start to exit (its own ledger), and its energy must be what its time allows.

These hold on a loaded machine. How each door's figure compares with ``run``'s for the same work depends on how
fast each process imports and starts on a busy machine: ``scripts/bench_window.py`` prints that table
(``pytest -s`` prints this session's).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.doors.window import DOORS, DRAW_W, LAUNCHED, PHASES, run_door, run_door_on_a_hard_double, whole
from zeus_run.records import TrialRecord

#: Largest relative difference between a door's record and its ledger.
AGREE = 0.05
#: Largest relative difference between a record's energy and its own time x the double's constant draw: the
#: counter (continuous here) and the record's clock count one span, so only their reading moments differ (a
#: door that under-charges its energy 5% is off by 5%).
RATIO = 0.01
#: How much longer than the script's process a launched door may charge (unit: s): the fork before the process's
#: start and the poll that sees its exit, on a loaded machine. A door that charges its trial twice the process
#: fails; the energy's upper bound grows by the idle draw over this and no more.
LAUNCH_SLACK_S = 1.0

pytestmark = [pytest.mark.xdist_group("test_window"), pytest.mark.heavy]  # heavy: scripts/test_heavy.sh


class _Doors(dict):
    """Each door's first record and its ledger, run when first asked for (a test of one door runs that door only)."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        super().__init__()
        self.factory = factory
        self.unavailable: set[str] = set()

    def get_door(self, name: str) -> tuple[TrialRecord, float] | None:
        if name not in self and name not in self.unavailable:
            try:
                self[name] = run_door(name, self.factory.mktemp(name.replace(" ", "_").replace("/", "_")))
            except pytest.skip.Exception:
                self.unavailable.add(name)
        return self.get(name)

    def table(self) -> None:
        run = self.get("run")
        run_e = whole(run[0])[1] if run is not None else None
        print(f"\n{'door':<26}{'time s':>8}{'energy J':>10}{'ledger J':>10}{'vs ledger':>11}{'vs run':>9}  window")
        for name, (r, ledger) in self.items():
            t, e = whole(r)
            vs_run = f"{e / run_e - 1:>+9.1%}" if run_e else f"{'-':>9}"
            print(f"{name:<26}{t:>8.2f}{e:>10.1f}{ledger:>10.1f}{e / ledger - 1:>+11.1%}{vs_run}  {r.window}")


@pytest.fixture(scope="session")
def door_energies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Doors]:
    """The doors' records and ledgers (each door run once for the session, when a test first needs it); prints
    the table at the end (``pytest -s``)."""
    doors = _Doors(tmp_path_factory)
    yield doors
    doors.table()


@pytest.mark.parametrize("door", list(DOORS))
def test_every_door_charges_the_trials_whole_span_at_what_the_gpu_drew(door_energies, door):
    got = door_energies.get_door(door)
    if got is None:
        pytest.skip(f"the {door} door is not available here")
    record, ledger = got
    assert record.reached and record.energy_source == "nvml", record
    # A script that asked for its trial itself estimated its start-up and says so (issue 46); the rest measured it.
    assert record.estimated == (door in ("Job API", "server client")), record
    t, e = whole(record)
    assert record.after_time is not None and record.after_time > 0.4, record  # the save after the target
    assert record.after_energy is not None and record.after_energy > 0.4 * DRAW_W, record
    assert e == pytest.approx(DRAW_W * t, rel=RATIO), record  # never less energy than its own time allows
    if door in LAUNCHED:  # measured from before the launch to after the exit: never less than the process
        assert e >= ledger * (1 - AGREE), (door, e, ledger, record)
    else:
        assert abs(e / ledger - 1) <= AGREE, (door, e, ledger, record)


@pytest.mark.parametrize("door", ["run", "exec"])
def test_a_launched_door_charges_what_a_gpu_with_phases_drew(tmp_path, door):
    """On a GPU as hard as a real one (idle through the imports, waking for data, training, a lower draw while
    saving; one counter for every process, 50 ms updates, 25% sampled), a door that reads the counter from before
    the launch to after the exit charges what it drew over the process, within 5% and the counter's slack: never
    less, and more only by the idle draw of the moments around the process it also holds."""
    record, led = run_door_on_a_hard_double(door, tmp_path)
    t, e = whole(record)
    assert record.reached and record.energy_source == "nvml" and not record.estimated, record
    # Its charged time is the process's span, and no more than a fork and an exit poll beyond it (issue 54, 5).
    assert led.span * (1 - AGREE) <= t <= led.span + LAUNCH_SLACK_S, (t, led, record)
    assert e >= led.truth * (1 - AGREE) - led.slack, (e, led, record)
    extra = min(max(t - led.span, 0.0), LAUNCH_SLACK_S)
    assert e <= led.truth * (1 + AGREE) + led.slack + PHASES["idle"] * extra, (e, led, record)


@pytest.mark.parametrize("door", ["ask/tell", "Job API"])
def test_a_self_measuring_door_measures_a_start_up_of_another_draw_or_says_it_estimated(tmp_path, door):
    """The start-up idles, then wakes (data, CUDA) before the script reads its trial: the power read when its meter
    opens is not the start-up's. The record is within 5% of what the GPU drew, plus the part it labels estimated
    (``estimated_energy``) and no more: a label is not a pass (issue 54, 5: the Job API charged +13.9% over the
    truth, and the check passed it because ``estimated`` was set)."""
    record, led = run_door_on_a_hard_double(door, tmp_path)
    _, e = whole(record)
    assert record.reached, record
    labelled = record.estimated_energy or 0.0
    assert door != "Job API" or labelled > 0, record  # it asked for itself: its start-up is estimated, and says so
    assert abs(e - led.truth) <= AGREE * led.truth + led.slack + labelled, (e, led, labelled, record)


def test_the_record_says_how_its_window_was_measured(door_energies):
    for door in DOORS:
        door_energies.get_door(door)
    windows = {door: r.window for door, (r, _) in door_energies.items()}
    assert windows["run"] == windows["callbacks under run"] == {"by": "launcher", "from": "launch", "to": "exit"}
    assert windows["exec"] == {"by": "agent", "from": "launch", "to": "exit"}
    for door in ("ask/tell", "callbacks under ask/tell"):  # start-up measured from the counter read at the ask
        w = windows[door]
        assert w is not None and (w["by"], w["from"], w["to"], w["start"]) == (
            "script",
            "process-start",
            "exit",
            "ask-counter",
        ), (door, w)
        assert "extended_j" not in w, (door, w)
    for door in ("Job API", "server client"):  # it asked for itself: its start-up is estimated, its tail measured
        w = windows[door]
        assert w is not None and (w["by"], w["from"], w["to"], w["extended_at"]) == (
            "script",
            "process-start",
            "exit",
            "power-at-start",
        ), (door, w)
        assert w["extended_s"] >= 1.4 and w["extended_j"] == pytest.approx(DRAW_W * w["extended_s"], rel=0.01)
        assert w["tail_s"] > 0, (door, w)
    assert windows["Job API"]["ask_s"] > 0  # its own ask, in its process, is not the trial's


def test_a_process_that_runs_trial_after_trial_charges_each_from_its_ask(tmp_path):
    """The `Job` API running two trials in one process: the first's part ends at the second's ask (what it did
    between, loading the next trial's data, is its tail), the second's window opens at its ask, on the same open
    counter (measured, not extended), less the ask itself; its energy is what the double drew meanwhile
    (tests/doors/test_whole_process.py checks each part against the double's own clock)."""
    import json

    from tests.doors import helpers
    from tests.doors.window import SCRIPT, Room, _setup, _sh

    room = Room(tmp_path, env={"WINDOW_TIMES": "0.5,0.3,0.3"})
    spec, run_dir = _setup(room)
    _sh(f"{helpers.PYTHON} {SCRIPT} --door job --spec {spec} --trials 2", room)
    first, second = helpers.with_tails(lambda: helpers.history(run_dir), 2)
    (line,) = (tmp_path / "ledger.jsonl").read_text().splitlines()
    trials = json.loads(line)["trials"]
    assert first.window is not None and first.window["from"] == "process-start", first.window
    assert first.window["to"] == "next-ask" and first.window["tail_s"] >= 0.5, first.window  # the next one's data
    assert second.window is not None and second.window["from"] == "ask", second.window
    assert "extended_s" not in second.window  # measured from the reading at its ask
    assert 0 <= second.window["ask_s"] <= trials[1]["asking_s"] + 0.01, (second.window, trials)
    # Both trials together: the second block's end less the first's, less the second's ask, plus the second's tail
    span = trials[1]["end"] - trials[0]["end"] - second.window["ask_s"] + second.window["tail_s"]
    both_t = first.window["tail_s"] + whole(second)[0]
    assert both_t == pytest.approx(span, rel=AGREE), (first, second, span)
    for r in (first, second):
        t, e = whole(r)
        assert e == pytest.approx(DRAW_W * t, rel=AGREE), r


@pytest.mark.frameworks
def test_the_hugging_face_callback_under_a_plain_ask_tell_charges_its_whole_process(tmp_path):
    """The real ``Trainer`` with `ZeusRunCallback` (`door_train_hf.py`), asked and told from a shell on the NVML
    double: its record covers the script's process from its start (``import torch`` and ``transformers``
    included) to its exit, as the shell timed it, at what the double drew."""
    pytest.importorskip("torch", reason="PyTorch is not installed (scripts/test_frameworks.sh installs it)")
    pytest.importorskip("transformers", reason="transformers is not installed (scripts/test_frameworks.sh installs it)")
    from tests.doors import helpers
    from tests.doors.window import Room, _sh
    from zeus_run.contract._exit import EXIT_POLL_S

    room = Room(tmp_path)
    run_dir = tmp_path / "runs"
    spec = tmp_path / "job.yaml"
    text = helpers.spec_text(run_dir).replace(f'"{helpers.SCRIPT}"]', f'"{helpers.SCRIPT_HF}"]')
    text = text.replace("energy: {source: estimate, watts: 100, basis: cpu-time}", "energy: {source: nvml}")
    spec.write_text(text + "metric: {source: events, name: eval_accuracy}\n")
    now = "date +%s.%N"
    _sh(
        f'eval "$({helpers.zr()} ask {spec} --format env)" || exit 9\n'
        f"t0=$({now})\n{helpers.PYTHON} {helpers.SCRIPT_HF} > train.log 2>&1\ncode=$?\nt1=$({now})\n"
        'echo "$t0 $t1" > span.txt\n'
        f'{helpers.zr()} tell "$ZEUS_RUN_DIR" "$ZEUS_ASK_TOKEN" --exit-code $code\n',
        room,
    )
    (record,) = helpers.history(run_dir)
    t0, t1 = (float(x) for x in (tmp_path / "span.txt").read_text().split())
    t, e = whole(record)
    assert record.reached and record.window is not None, record
    assert (record.window["from"], record.window["to"]) == ("process-start", "exit"), record.window
    # The shell's span also holds the fork and `date` itself; the exit is seen within a poll of the watcher that
    # waits for it (the interpreter's teardown after its last hook: seconds with torch loaded).
    assert (t1 - t0) * (1 - AGREE) <= t <= (t1 - t0) + 2 * EXIT_POLL_S, (t, t1 - t0)
    assert record.window["extended_end_s"] > 0, record.window
    assert e == pytest.approx(DRAW_W * t, rel=AGREE), record
