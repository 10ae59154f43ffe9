"""The same trial through every door on the NVML double, with its own ledger (tests/doors/test_window.py and
scripts/bench_window.py).

`window_train.py` spends 1.5 s starting up before it reads its trial, trains three epochs, saves for 0.5 s after
its target; the double draws a constant `DRAW_W`. Each door runs it once in a directory of its own and returns its
first record with the ledger of what the double drew over the trial's span (`ledger`).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.doors import helpers
from zeus_run.contract import Env
from zeus_run.records import TrialRecord

SCRIPT = Path(__file__).with_name("window_train.py")
FAKE_PYNVML = Path(__file__).resolve().parents[1] / "fake_pynvml"
#: The double's constant power draw (unit: W).
DRAW_W = 200.0


@dataclass
class Room:
    """Where a door runs: its directory, lines added to the job's spec, and environment added to its processes."""

    tmp: Path
    spec_extra: str = ""
    env: dict[str, str] = field(default_factory=dict)
    gpu: dict[str, object] = field(default_factory=dict)  # more FAKE_NVML_NODES settings of its GPU


def _spec(room: Room, door: str = "trial") -> str:
    return f"""
name: window
command: ["{helpers.PYTHON}", "{SCRIPT}", "--door", "{door}"]
batch_sizes: [8, 16]
default_batch_size: 8
target_metric: 0.9
max_epochs: 6
recurrences: 2
lease: 600
energy: {{source: nvml}}
run_dir: {room.tmp / "runs"}
{room.spec_extra}
"""


def _env(room: Room, **extra: str) -> dict[str, str]:
    nodes = room.tmp / "nodes.json"
    gpu = {"uuid": "GPU-w", "max_mw": 300_000, "draw_w": DRAW_W, **room.gpu}
    nodes.write_text(json.dumps({"local": {"gpus": [gpu]}}))
    path = os.pathsep.join([*filter(None, [room.env.get("PYTHONPATH")]), str(FAKE_PYNVML), str(helpers.REPO)])
    return {
        **room.env,
        "PYTHONPATH": path,
        "FAKE_NVML_NODES": str(nodes),
        "WINDOW_LEDGER": str(room.tmp / "ledger.jsonl"),
        **extra,
    }


def _sh(script: str, room: Room, **env: str) -> None:
    r = helpers.sh(script, room.tmp, **_env(room, **env))
    assert f'File "{helpers.REPO / "zeus_run"}' not in r.stderr, r.stderr  # no traceback of zeus-run's own
    assert r.returncode == 0, r.stdout + r.stderr


def _setup(room: Room, door: str = "trial") -> tuple[Path, Path]:
    room.tmp.mkdir(parents=True, exist_ok=True)
    spec = room.tmp / "job.yaml"
    spec.write_text(_spec(room, door))
    return spec, room.tmp / "runs"


def _history(run_dir: Path) -> list[TrialRecord]:
    """The run directory's history, asserted to exist first: a door that saved no record fails on an assertion that
    says so (check_the_checks counts only assertions), not on the history's read error."""
    assert (run_dir / "history.jsonl").is_file(), f"the door saved no record: no history.jsonl in {run_dir}"
    return helpers.history(run_dir)


def _run(room: Room, door: str = "trial") -> TrialRecord:
    spec, run_dir = _setup(room, door)
    _sh(f"{helpers.zr()} run {spec} -n 1", room)
    return _history(run_dir)[0]


def _asktell(room: Room, door: str = "trial") -> TrialRecord:
    spec, run_dir = _setup(room, door)
    _sh(
        f'eval "$({helpers.zr()} ask {spec} --format env)" || exit 9\n'
        f"{helpers.PYTHON} {SCRIPT} --door {door}\n"
        "code=$?\ndate +%s.%N > exited.txt\n"  # when the process was gone, as its shell saw it
        f'{helpers.zr()} tell "$ZEUS_RUN_DIR" "$ZEUS_ASK_TOKEN" --exit-code $code\n',
        room,
    )
    return _history(run_dir)[0]


def _exec(room: Room) -> TrialRecord:
    spec, run_dir = _setup(room)
    _sh(f"{helpers.zr()} exec --job {spec}", room)
    return _history(run_dir)[0]


def _job(room: Room) -> TrialRecord:
    spec, run_dir = _setup(room)
    _sh(f"{helpers.PYTHON} {SCRIPT} --door job --spec {spec}\ndate +%s.%N > exited.txt", room)
    return helpers.with_tails(lambda: _history(run_dir), 1)[0]  # its tail to the exit, measured outside it


#: The server door's job name, and its run directory under the server's root (`server_run_dir`).
SERVER_JOB = "window"


def server_run_dir(room: Room) -> Path:
    return room.tmp / "root" / SERVER_JOB


def _server(room: Room) -> TrialRecord:
    pytest.importorskip("fastapi", reason="the server extra is not installed: pip install -e '.[server]'")
    pytest.importorskip("uvicorn", reason="the server extra is not installed: pip install -e '.[server]'")
    from tests.server.helpers import ServerProcess

    spec, _ = _setup(room)
    server = ServerProcess(room.tmp / "root", extra=("--allow-path", str(SCRIPT.parent)), env=_env(room))
    try:
        client = server.client()
        client.register(SERVER_JOB, spec.read_text())
        env = {Env.SERVER: server.url, Env.SERVER_TOKEN: server.token, Env.SERVER_JOB: SERVER_JOB}
        _sh(f"{helpers.PYTHON} {SCRIPT}\ndate +%s.%N > exited.txt", room, **env)
        return helpers.with_tails(lambda: [TrialRecord.from_json(r) for r in client.history(SERVER_JOB)], 1)[0]
    finally:
        server.stop()


DOORS: dict[str, Callable[[Room], TrialRecord]] = {
    "run": _run,
    "exec": _exec,
    "ask/tell": _asktell,
    "Job API": _job,
    "server client": _server,
    "callbacks under run": lambda room: _run(room, "driver"),
    "callbacks under ask/tell": lambda room: _asktell(room, "driver"),
}


def whole(r: TrialRecord) -> tuple[float, float]:
    """A record's whole span: time and energy to the point it was judged at, and after it."""
    return r.time + (r.after_time or 0.0), r.energy + (r.after_energy or 0.0)


def ledger(tmp: Path, record: TrialRecord) -> float:
    """What the double drew over the trial's span (the script's own ledger: its start to its last exit hook; to the
    moment its shell saw it gone where one did: every door but ``run``'s and ``exec``'s), less zeus-run's own ask
    and tell in the process, which the record leaves out (unit: J)."""
    (line,) = (tmp / "ledger.jsonl").read_text().splitlines()
    span = json.loads(line)
    exited = tmp / "exited.txt"
    end = float(exited.read_text()) if exited.exists() else span["end"]
    ask_s = (record.window or {}).get("ask_s", 0.0)
    assert 0.0 <= ask_s <= span["asking_s"] + 0.01, (ask_s, span)  # only the ask itself is left out
    return DRAW_W * (end - span["start"] - ask_s - span.get("telling_s", 0.0))


#: Doors where a launcher (or the agent) measures the script: from before its launch to after its exit.
LAUNCHED = ("run", "exec", "callbacks under run")


def run_door(name: str, tmp: Path) -> tuple[TrialRecord, float]:
    """The door's first record and its ledger (unit: J)."""
    record = DOORS[name](Room(tmp))
    return record, ledger(tmp, record)


#: The hard double's draws (unit: W): idle (imports included), waking for data and CUDA, training, saving.
PHASES = {"idle": 60.0, "startup": 60.0, "load": 220.0, "train": 250.0, "tail": 120.0}
#: Its counter's update period (unit: ms) and the share of it sampled (A100/H100: 25%).
UPDATE_MS, SAMPLE_SHARE = 50.0, 0.25


@dataclass(frozen=True)
class HardLedger:
    """What a GPU with phases drew over the script's span (`truth`, unit: J; the marks integrated by the double's
    truth, not by zeus-run), the counter's honest slack (unit: J) and the span (unit: s)."""

    truth: float
    slack: float
    span: float


def run_door_on_a_hard_double(name: str, tmp: Path) -> tuple[TrialRecord, HardLedger]:
    """The door's first record on a GPU as hard as a real one (`tests.fake_nvml.GpuTruth`: power by phase from the
    script's marks, one counter for every process, 50 ms updates, 25% sampled), and its ledger."""
    import time

    from tests.fake_nvml import GpuTruth

    marks = tmp / "marks.jsonl"
    boot_now = time.clock_gettime(time.CLOCK_BOOTTIME)
    gpu = {"marks": str(marks), "phases": PHASES, "t0": boot_now - 10.0, "update_ms": UPDATE_MS}
    gpu["sample_share"] = SAMPLE_SHARE
    env = {"WINDOW_MARKS": str(marks), "WINDOW_PHASES": json.dumps(PHASES)}
    record = DOORS[name](Room(tmp, env=env, gpu=gpu))
    (line,) = (tmp / "ledger.jsonl").read_text().splitlines()
    span = json.loads(line)
    exited = tmp / "exited.txt"
    end = float(exited.read_text()) if exited.exists() else span["end"]
    to_boot = time.clock_gettime(time.CLOCK_BOOTTIME) - time.time()  # the ledger's Unix times on the marks' clock
    a, b = span["start"] + to_boot, end + to_boot
    truth = GpuTruth(marks=str(marks), idle_w=PHASES["idle"])
    ask_s = (record.window or {}).get("ask_s", 0.0)
    joules = truth.true_energy(a, b) - ask_s * PHASES["load"]  # an ask in the process is made after the start-up
    pieces = [w for _, _, w in truth.segments(a, b)]
    slack = UPDATE_MS / 1000.0 * (max(pieces) + sum(abs(y - x) for x, y in itertools.pairwise(pieces)))
    return record, HardLedger(joules, slack, b - a - ask_s)
