"""``zeus-run plot``: a real image from real, simulated and hand-made histories."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.factories import make_record
from tests.sim_helpers import write_tiny_traces
from zeus_run.cli import app
from zeus_run.errors import UsageError
from zeus_run.records import TrialRecord
from zeus_run.views.plot import DPI, FIGSIZE, PlotUnavailableError, load_matplotlib, plot_history

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def rec(i: int, bs: int, cost: float, reached: bool = True, stage: str = "thompson", **kw) -> TrialRecord:
    """Recurrence ``i``'s only trial, costing ``cost`` J over 5 epochs at 300 W; a failure is a crash."""
    shape = dict(epochs=5, time=cost / 200, energy=cost, max_power=300.0, cost=cost)
    shape["stop_reason"] = "target_reached" if reached else "crashed"
    return make_record(
        kw.pop("trial", i - 1), recurrence=i, batch_size=bs, stage=stage, reached=reached, **{**shape, **kw}
    )


def records() -> list[TrialRecord]:
    out = [
        rec(1, 256, 9000.0, stage="pruning", power_limit=300.0),
        rec(2, 128, 7000.0, stage="pruning", power_limit=250.0),
        rec(
            3,
            512,
            2000.0,
            reached=False,
            stage="pruning",
            message="exit code 1; last output:\nRuntimeError: CUDA out of memory",
        ),
        rec(3, 64, 6500.0, attempt=2, trial=3, stage="pruning", power_limit=225.0),
    ]
    for i in range(4, 16):
        out.append(rec(i, 64 if i % 3 else 128, 6000.0 + 50 * (i % 4), trial=i, power_limit=225.0))
    return out


def image_stats(path: Path) -> tuple[tuple[int, int], int, float, int]:
    """(size, distinct colours, fraction of non-white pixels, pixels near the bars' blue)."""
    import numpy as np
    from PIL import Image

    with Image.open(path) as im:
        rgb = np.asarray(im.convert("RGB")).astype(int)
    size = (rgb.shape[1], rgb.shape[0])
    flat = rgb.reshape(-1, 3)
    colours = len(np.unique(flat, axis=0))
    non_white = float((flat.sum(axis=1) < 3 * 245).mean())
    blue = int((np.abs(flat - np.array([0, 114, 178])) < 30).all(axis=1).sum())
    return size, colours, non_white, blue


def test_plot_renders_a_real_image(tmp_path):
    pytest.importorskip("matplotlib")
    out = plot_history(records(), tmp_path / "run.png", default_batch_size=256)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    size, colours, non_white, blue = image_stats(out)
    assert size == (int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI))
    assert colours > 50  # text, bars, boxes: not a blank canvas
    assert 0.05 < non_white < 0.9
    assert blue > 2000  # the Thompson-sampling bars and the points are drawn


def test_plot_of_a_run_that_only_explored(tmp_path):
    pytest.importorskip("matplotlib")
    out = plot_history(records()[:2], tmp_path / "early.svg")
    text = out.read_text()
    assert text.lstrip().startswith("<?xml") and "still exploring" in text


def test_plot_refuses_unknown_suffix_and_empty_history(tmp_path):
    with pytest.raises(UsageError, match=r"\.png"):
        plot_history(records(), tmp_path / "run.gif")
    with pytest.raises(UsageError, match="no trials"):
        plot_history([], tmp_path / "run.png")


def test_missing_matplotlib_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(PlotUnavailableError, match=r"zeus-run\[plot\]"):
        load_matplotlib()
    run = tmp_path / "run"
    run.mkdir()
    (run / "history.jsonl").write_text("\n".join(__import__("json").dumps(r.to_json()) for r in records()) + "\n")
    r = runner.invoke(app, ["plot", str(run)])
    assert r.exit_code == 2
    assert "pip install 'zeus-run[plot]'" in r.output and "Traceback" not in r.output


def test_plot_command_on_a_simulated_run_directory(tmp_path):
    pytest.importorskip("matplotlib")
    traces = write_tiny_traces(tmp_path / "traces")
    runs = tmp_path / "runs"
    sim = subprocess.run(
        [
            sys.executable,
            "-m",
            "zeus_run",
            "simulate",
            "squad",
            "--traces",
            str(traces),
            "--gpu",
            "tiny",
            "--run-dir",
            str(runs),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert sim.returncode == 0, sim.stderr
    (run,) = runs.glob("squad-tiny-*-seed1")  # named after the default policy
    r = runner.invoke(app, ["plot", str(run)])
    assert r.exit_code == 0, r.output
    out = run / "plot.png"
    size, colours, non_white, _ = image_stats(out)
    assert size == (900, 1000) and colours > 50 and non_white > 0.05
    custom = tmp_path / "pics" / "squad.png"
    assert runner.invoke(app, ["plot", str(run), "-o", str(custom)]).exit_code == 0
    assert custom.stat().st_size > 10_000
