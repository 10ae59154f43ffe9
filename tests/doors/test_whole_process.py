"""A trial is its whole process, through every door (issue 46, items 1 and 2).

`whole_train.py` starts up for 1.5 s, trains to its target, tells, then works 2 s more (saving, evaluating,
tearing down) before it asks for its next trial or exits. On the NVML double (one counter per GPU, a constant
draw), what the GPU drew for a trial is the double's draw x the trial's part of the process's life, which this
test takes from the script's own ledger (its start read from /proc by the script, wall clocks around its asks)
and from the shell's clock at the process's exit: never from zeus-run's own functions. Each door's whole charge
(``time`` + ``after_time``, ``energy`` + ``after_energy``) must be within 5% of it and of the same work under
``run``; in a process with two trials, the first's part ends at the second's ask, and the second is not
charged the first's tail. A trial that asked for itself estimated its start-up and says so; a shell's
ask/tell and ``exec`` measure it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.doors import helpers
from zeus_run.contract import Env
from zeus_run.records import TrialRecord

SCRIPT = Path(__file__).with_name("whole_train.py")
FAKE_PYNVML = Path(__file__).resolve().parents[1] / "fake_pynvml"
#: The double's constant draw (unit: W).
DRAW_W = 200.0
#: Largest relative difference allowed.
AGREE = 0.05
#: Start-up, epoch and work after the tell (unit: s).
TIMES = (1.5, 0.8, 2.0)

pytestmark = [pytest.mark.xdist_group("test_whole_process"), pytest.mark.heavy]  # heavy: scripts/test_heavy.sh


def _spec(tmp: Path, door: str) -> Path:
    """The job; its command notes when the script's process was gone, as a shell around it saw it (``exited.txt``:
    where a launcher runs it)."""
    spec = tmp / "job.yaml"
    command = f"{helpers.PYTHON} {SCRIPT} --door {door} && date +%s.%N >> {tmp / 'exited.txt'}"
    spec.write_text(
        f"""
name: whole
command: ["sh", "-c", "{command}"]
batch_sizes: [8, 16]
default_batch_size: 8
target_metric: 0.9
max_epochs: 6
recurrences: 4
lease: 600
energy: {{source: nvml}}
run_dir: {tmp / "runs"}
"""
    )
    return spec


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    nodes = tmp / "nodes.json"
    if not nodes.exists():
        nodes.write_text(json.dumps({"local": {"gpus": [{"uuid": "GPU-x", "max_mw": 300_000, "draw_w": DRAW_W}]}}))
    return {
        "PYTHONPATH": os.pathsep.join([str(FAKE_PYNVML), str(helpers.REPO)]),
        "FAKE_NVML_NODES": str(nodes),
        "WHOLE_LEDGER": str(tmp / "ledger.jsonl"),
        "WHOLE_TIMES": ",".join(map(str, TIMES)),
        **extra,
    }


def _sh(script: str, tmp: Path, **env: str) -> None:
    """Run ``script``, then note when the training process was gone as the shell saw it (``exited.txt``)."""
    r = helpers.sh(script, tmp, **_env(tmp, **env))
    assert f'File "{helpers.REPO / "zeus_run"}' not in r.stderr, r.stderr  # no traceback of zeus-run's own
    assert r.returncode == 0, r.stdout + r.stderr


def _python(tmp: Path, door: str, *args: str) -> str:
    """The shell lines that run the script and note its exit."""
    return f"{helpers.PYTHON} {SCRIPT} --door {door} {' '.join(args)} || exit 9\ndate +%s.%N >> exited.txt\n"


def truth(tmp: Path, told_here: bool = False) -> list[float]:
    """What the double drew for each trial of the script's process (unit: J): the first from the process's start,
    each later one from its ask; each to the next trial's ask, the last to the process's exit as the shell saw
    it (else its last exit hook); less the asks the process made itself, and where it told its trials itself
    (``told_here``), less those tells (zeus-run's work, as a launcher's ask and tell are)."""
    (line,) = (tmp / "ledger.jsonl").read_text().splitlines()
    ledger = json.loads(line)
    exited = tmp / "exited.txt"
    end = float(exited.read_text().split()[0]) if exited.exists() else ledger["last_hook"]
    trials = ledger["trials"]
    out = []
    for i, t in enumerate(trials):
        begin = ledger["start"] if i == 0 else t["ask_begin"]
        until = trials[i + 1]["ask_begin"] if i + 1 < len(trials) else end
        own = (t["ask_end"] - t["ask_begin"]) + ((t["told"] - t["tell_begin"]) if told_here else 0.0)
        out.append(DRAW_W * (until - begin - own))
    return out


def whole(r: TrialRecord) -> tuple[float, float]:
    return r.time + (r.after_time or 0.0), r.energy + (r.after_energy or 0.0)


def _run(tmp: Path) -> list[TrialRecord]:
    spec = _spec(tmp, "trial")
    _sh(f"{helpers.zr()} run {spec} -n 1", tmp)
    return helpers.history(tmp / "runs")


def _exec(tmp: Path) -> list[TrialRecord]:
    spec = _spec(tmp, "trial")
    _sh(f"{helpers.zr()} exec --job {spec}\n", tmp)
    return helpers.history(tmp / "runs")


def _asktell(door: str):
    def go(tmp: Path) -> list[TrialRecord]:
        spec = _spec(tmp, door)
        _sh(
            f'eval "$({helpers.zr()} ask {spec} --format env)" || exit 9\n'
            + _python(tmp, door)
            + f'{helpers.zr()} tell "$ZEUS_RUN_DIR" "$ZEUS_ASK_TOKEN" --exit-code 0\n',
            tmp,
        )
        return helpers.history(tmp / "runs")

    return go


def _job(tmp: Path) -> list[TrialRecord]:
    spec = _spec(tmp, "job")
    _sh(_python(tmp, "job", "--spec", str(spec), "--trials", "2"), tmp)
    return helpers.with_tails(lambda: helpers.history(tmp / "runs"), 2)


def _server(door: str):
    def go(tmp: Path) -> list[TrialRecord]:
        pytest.importorskip("fastapi", reason="the server extra is not installed: pip install -e '.[server]'")
        pytest.importorskip("uvicorn", reason="the server extra is not installed: pip install -e '.[server]'")
        from tests.server.helpers import ServerProcess

        spec = _spec(tmp, door)
        server = ServerProcess(tmp / "root", extra=("--allow-path", str(SCRIPT.parent)), env=_env(tmp))
        try:
            client = server.client()
            client.register("whole", spec.read_text())
            env = {Env.SERVER: server.url, Env.SERVER_TOKEN: server.token, Env.SERVER_JOB: "whole"}
            _sh(_python(tmp, door, "--trials", "2"), tmp, **env)
            return helpers.with_tails(lambda: [TrialRecord.from_json(r) for r in client.history("whole")], 2)
        finally:
            server.stop()

    return go


DOORS = {
    "run": _run,
    "exec": _exec,
    "ask/tell": _asktell("trial"),
    "callbacks under ask/tell": _asktell("driver"),
    "Job API": _job,
    "server client": _server("trial"),
    "callbacks under the server": _server("driver"),
}
#: Doors where a launcher (or the agent) measures the script: from before its launch to after its exit.
LAUNCHED = ("run", "exec")
#: Doors where the script asks for its own trial: its start-up is estimated, and said to be.
SELF_ASKED = ("Job API", "server client", "callbacks under the server")


@dataclass
class Door:
    """A door's records, the double's truth for each, and where it ran."""

    records: list[TrialRecord]
    truths: list[float]
    tmp: Path

    def ledger(self) -> dict:
        (line,) = (self.tmp / "ledger.jsonl").read_text().splitlines()
        return json.loads(line)


class _Doors(dict):
    """Each door's records and the double's truth for each, run when a test first asks for the door (``door in
    doors`` or ``doors[door]``): a test of one door runs that door only (check_the_checks runs one or three)."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        super().__init__()
        self.factory = factory
        self.unavailable: set[str] = set()

    def _run(self, name: object) -> None:
        if isinstance(name, str) and name in DOORS and name not in self.unavailable and not super().__contains__(name):
            tmp = self.factory.mktemp(name.replace(" ", "_").replace("/", "_"))
            try:
                self[name] = Door(DOORS[name](tmp), truth(tmp, name in SELF_ASKED), tmp)
            except pytest.skip.Exception:
                self.unavailable.add(name)

    def __contains__(self, name: object) -> bool:
        self._run(name)
        return super().__contains__(name)

    def __getitem__(self, name: str) -> Door:
        self._run(name)
        return super().__getitem__(name)

    def table(self) -> None:
        run = self.get("run")
        run_rate = whole(run.records[0])[1] / run.truths[0] if run is not None else None
        print(
            f"\n{'door':<28}{'trial':>6}{'time s':>8}{'energy J':>10}{'truth J':>10}{'vs truth':>10}{'vs run':>8}  est"
        )
        for name, door in self.items():
            for k, (r, j) in enumerate(zip(door.records, door.truths, strict=False)):
                t, e = whole(r)
                est = f"{r.estimated_share:.1%}" if r.estimated_share is not None else "-"
                vs_run = f"{e / j / run_rate - 1:>+8.1%}" if run_rate else f"{'-':>8}"
                print(f"{name:<28}{k + 1:>6}{t:>8.2f}{e:>10.1f}{j:>10.1f}{e / j - 1:>+10.1%}{vs_run}  {est}")


@pytest.fixture(scope="module")
def doors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Doors]:
    """Each door's records and the double's truth for each (each door run once, when first asked for); prints the
    table at the end (``pytest -s``)."""
    out = _Doors(tmp_path_factory)
    yield out
    out.table()


@pytest.mark.parametrize("door", list(DOORS))
def test_each_trial_is_charged_its_part_of_the_process_as_the_double_drew_it(doors, door):
    if door not in doors:
        pytest.skip(f"the {door} door is not available here")
    d = doors[door]
    assert len(d.records) == len(d.truths), (d.records, d.truths)
    for r, j in zip(d.records, d.truths, strict=True):
        assert r.reached and r.energy_source == "nvml", r
        _, e = whole(r)
        if door in LAUNCHED:  # measured from before its launch to after its exit: never less than the process
            assert e >= j * (1 - AGREE), (door, e, j, r)
        else:
            assert abs(e / j - 1) <= AGREE, (door, e, j, r)


@pytest.mark.parametrize("door", list(DOORS))
def test_the_first_trial_costs_what_the_same_work_costs_under_run(doors, door):
    """Per joule the double drew, each door charges what ``run`` charges (the same script takes longer or shorter
    on a loaded machine, so each is taken against its own truth)."""
    if door not in doors:
        pytest.skip(f"the {door} door is not available here")
    run = doors["run"]
    run_rate = whole(run.records[0])[1] / run.truths[0]
    rate = whole(doors[door].records[0])[1] / doors[door].truths[0]
    assert abs(rate / run_rate - 1) <= AGREE, (door, rate, run_rate)


@pytest.mark.parametrize("door", ["Job API", "server client", "callbacks under the server"])
def test_the_work_after_a_tell_is_that_trials_and_not_the_next_ones(doors, door):
    """The 2 s after the first trial's tell are its tail (up to the second's ask), the 2 s after the second's up to
    the exit; the second trial starts at its ask."""
    if door not in doors:
        pytest.skip(f"the {door} door is not available here")
    first, second = doors[door].records
    for r, to in ((first, "next-ask"), (second, "exit")):
        assert r.window is not None and r.window["to"] == to, r.window
        assert r.after_time is not None and r.after_time >= TIMES[2], r  # at least the work after its tell
        assert r.window["tail_s"] >= TIMES[2] and r.window["tail_j"] >= DRAW_W * TIMES[2] * (1 - AGREE), r.window
    assert second.window is not None and second.window["from"] == "ask", second.window


@pytest.mark.parametrize("door", SELF_ASKED)
def test_a_trial_that_asked_for_itself_says_its_start_up_was_estimated(doors, door):
    """Its start-up (the process's start to its ask, by the script's own clocks) is estimated, and the record
    says how much; its next trial, measured from its ask on the same counter, estimates nothing."""
    if door not in doors:
        pytest.skip(f"the {door} door is not available here")
    d = doors[door]
    first, later = d.records
    ledger = d.ledger()
    start_up = DRAW_W * (ledger["trials"][0]["ask_begin"] - ledger["start"])
    whole_e = whole(first)[1]
    assert first.estimated and first.estimated_energy is not None, first
    assert abs(first.estimated_energy - start_up) <= AGREE * d.truths[0], (first.estimated_energy, start_up)
    assert first.estimated_share == pytest.approx(first.estimated_energy / whole_e, rel=1e-6), first
    assert not later.estimated and later.estimated_energy is None, later


@pytest.mark.parametrize("door", ["exec", "ask/tell", "callbacks under ask/tell"])
def test_a_script_started_after_a_shell_ask_or_by_exec_has_its_start_up_measured(doors, door):
    (r,) = doors[door].records
    assert not r.estimated and r.estimated_energy is None and r.estimated_share is None, r
    assert r.window is not None and "extended_j" not in r.window, r.window
    if door != "exec":
        assert r.window["start"] == "ask-counter", r.window


def test_history_marks_an_estimated_start_up(doors):
    if "Job API" not in doors:
        pytest.skip("no Job API door")
    d = doors["Job API"]
    run_dir = d.tmp / "runs"

    def history(*args: str) -> str:
        cmd = [helpers.PYTHON, "-m", "zeus_run", "history", str(run_dir), *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=helpers.clean_env(), check=True).stdout

    out = history("--trials")
    assert "~estimated=" in out, out
    rows = json.loads(history("--format", "json"))["trials"]
    assert rows[0]["estimated"] is True and rows[0]["estimated_share"] > 0, rows[0]
    assert "estimated_share" not in rows[1], rows[1]
