"""One baseline for every saving: run's summary, history, report, Prometheus and simulate agree to the digit.

The run is simulated on the paper's traces with power limits (cifar100 on a V100: the default batch
size 1024 runs at 175 W, not the 250 W maximum), so the baseline must scale b0's runs to the
maximum limit (`zeus_run.views.baseline`). A planted slow recurrence (the last one again, twice as
slow) changes no mean and no recommendation; what it spent counts, against the default run as slow,
and it is listed. MLflow's figure is checked in tests/export/test_integrations.py (marker ``integrations``).
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from zeus_run.cli import app
from zeus_run.export import exposition
from zeus_run.rundir.history import read_history
from zeus_run.views.jobs import load_job

# One xdist worker runs the whole module and its module-scoped fixture (`.ci/run`: -n 2 --dist loadgroup).
pytestmark = [pytest.mark.usefixtures("traces_dir"), pytest.mark.xdist_group("test_one_baseline")]


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> tuple[Path, dict]:
    from tests.conftest import TRACES

    if not (TRACES / "summary_train.csv").exists():
        pytest.skip("../shared/traces is not beside this checkout")
    out = tmp_path_factory.mktemp("baseline") / "runs"
    args = ["simulate", "cifar100", "--traces", str(TRACES), "--gpu", "v100", "--horizon", "30"]
    res = CliRunner().invoke(app, [*args, "--run-dir", str(out), "--format", "json"])
    assert res.exit_code == 0, res.output
    (run,) = out.iterdir()
    return run, json.loads(res.stdout)


def _pct(text: str, what: str) -> str:
    """The saving stated on ``what``'s line: its first ``N.N% saved`` (or ``more``) after the figures."""
    assert text.strip().startswith(what), text
    m = re.search(r"(\d+\.\d)% (saved|more)", text.split("): ", 1)[-1].split(": ", 1)[-1])
    assert m, f"no {what} saving in {text!r}"
    return m.group(1) + ("" if m.group(2) == "saved" else "-")


def _whole_line(text: str, what: str) -> str:
    """The ``  cost ...`` line under the whole history's heading."""
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("Whole history"))
    return next(ln for ln in lines[head + 1 :] if ln.strip().startswith(f"{what} "))


def views(run: Path) -> dict[str, object]:
    """The cost and energy saving as each view shows it: exact where the view is a number, else its text."""
    from zeus_run.cli.run import print_run_summary
    from zeus_run.views.report import render_report

    out: dict[str, object] = {}
    job = load_job(run)
    hist = CliRunner().invoke(app, ["history", str(run), "--format", "json"])
    assert hist.exit_code == 0, hist.output
    summary = json.loads(hist.stdout)["summary"]
    out["history"] = (summary["savings_cost"], summary["savings_energy"])
    out["history ci"] = (tuple(summary["savings_cost_ci"]), tuple(summary["savings_energy_ci"]))
    table = CliRunner().invoke(app, ["history", str(run)]).stdout
    out["history table"] = (_pct(_whole_line(table, "cost"), "cost"), _pct(_whole_line(table, "energy"), "energy"))
    buf = io.StringIO()
    records = read_history(run)
    print_run_summary(Console(file=buf, width=400), records, run, records[0].batch_size)
    text = buf.getvalue()
    out["run summary"] = (_pct(_whole_line(text, "cost"), "cost"), _pct(_whole_line(text, "energy"), "energy"))
    html = render_report(job)
    rows = dict(re.findall(r"<td class=l>whole history against the default: (\w+)</td><td[^>]*>([^<]*)<", html))
    assert rows, "no whole-history row in the report"
    out["report"] = (_pct("cost " + rows["cost"], "cost"), _pct("energy " + rows["energy"], "energy"))
    prom = dict(re.findall(r'^zeus_run_savings_ratio\{[^}]*quantity="(\w+)"\} (\S+)$', exposition([job]), re.M))
    out["prometheus"] = (float(prom["cost"]), float(prom["energy"]))
    low = dict(re.findall(r'^zeus_run_savings_low_ratio\{[^}]*quantity="(\w+)"\} (\S+)$', exposition([job]), re.M))
    high = dict(re.findall(r'^zeus_run_savings_high_ratio\{[^}]*quantity="(\w+)"\} (\S+)$', exposition([job]), re.M))
    out["prometheus ci"] = tuple((float(low[q]), float(high[q])) for q in ("cost", "energy"))
    out["summary"] = (job.summary.savings_cost, job.summary.savings_energy)
    return out


def _agree(seen: dict[str, object], sim_json: dict) -> None:
    saved, ci = sim_json["saved"], sim_json["saved_ci"]
    exact = (saved["cost"], saved["energy"])
    shown = tuple(f"{abs(v) * 100:.1f}" + ("" if v >= 0 else "-") for v in exact)
    for name in ("history", "prometheus", "summary"):
        assert seen[name] == exact, name
    for name in ("history ci", "prometheus ci"):
        assert seen[name] == (tuple(ci["cost"]), tuple(ci["energy"])), name
    for name in ("history table", "run summary", "report"):
        assert seen[name] == shown, name


def test_every_view_gives_the_same_saving_against_b0_at_the_max_limit(sim):
    run, sim_json = sim
    job = load_job(run)
    base = job.summary.baseline
    assert base is not None and base.power_limit == 250 and base.scaled == base.runs  # b0 ran at 175 W
    assert {r.power_limit for r in job.records if r.batch_size == 1024} == {175}
    _agree(views(run), sim_json)
    # Scaled to 250 W, b0 takes less time than it took at 175 W: the time saving is not understated.
    b0 = [r for r in job.records if r.batch_size == 1024 and r.reached]
    assert base.time < sum(r.time for r in b0) / len(b0)


def _means(stats):
    return [(b.batch_size, b.converged, b.mean_cost, b.mean_energy, b.mean_time) for b in stats]


def test_one_slow_try_of_one_batch_size_charges_the_default_nothing_more(sim, tmp_path):
    run, _ = sim
    before = load_job(run).summary
    slow = tmp_path / run.name
    shutil.copytree(run, slow)
    records = read_history(slow)
    last = records[-1]
    planted = dataclasses.replace(
        last, recurrence=last.recurrence + 1, trial=last.trial + 1, time=last.time * 2, energy=last.energy * 2
    )
    planted = dataclasses.replace(planted, cost=last.cost * 2)
    with open(slow / "history.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(planted.to_json()) + "\n")
    job = load_job(slow)
    after = job.summary
    assert after.slow.keys() == {planted.recurrence}
    factor = after.slow[planted.recurrence]
    assert factor == pytest.approx(2.0, rel=0.05)
    # No mean and no recommendation moves; the slow try is counted, out of the means...
    assert _means(after.by_batch_size) == _means(before.by_batch_size)
    assert sum(b.trials for b in after.by_batch_size) == after.trials == before.trials + 1
    assert after.recommendation == before.recommendation
    assert after.baseline == before.baseline
    # ... what it spent counts on zeus-run's side, and one slow try of one batch size is no evidence that
    # the machine ran slow: the default is charged its usual mean, not 2x.
    assert after.compared_energy == pytest.approx(before.compared_energy + planted.energy)
    assert after.total_energy == after.compared_energy
    base = before.baseline
    assert base is not None and before.baseline_energy is not None and after.baseline_energy is not None
    assert after.baseline_energy == pytest.approx(before.baseline_energy + base.energy)
    assert after.savings_energy is not None and before.savings_energy is not None
    assert after.savings_energy < before.savings_energy
    # The machine may have been slow: the interval's upper end allows the default that slowdown.
    energy = after.saved["energy"]
    assert energy is not None and energy.default_high is not None
    assert energy.default_high >= before.baseline_energy + 1.9 * base.energy
    # The saving without the slow night is shown beside it: the history before it.
    calm = after.saved_without_slow["energy"]
    assert calm is not None and calm.value == pytest.approx(before.savings_energy)
    prom = dict(re.findall(r"^(zeus_run_energy_saved_joules)\{[^}]*\} (\S+)$", exposition([job]), re.M))
    assert float(prom["zeus_run_energy_saved_joules"]) == pytest.approx(after.baseline_energy - after.compared_energy)
    seen = views(slow)
    assert seen["history"] == (after.savings_cost, after.savings_energy) == seen["prometheus"]
    text = CliRunner().invoke(app, ["history", str(slow)]).stdout
    assert "Slow recurrences" in text and f"{planted.recurrence} (2.0x; the default charged 1.0x)" in text
    assert f"without the slow recurrence(s) {planted.recurrence}" in text
    assert "against the default run as slow" not in text
    from zeus_run.views.report import render_report

    assert f"whole history without the slow recurrences ({planted.recurrence}): cost" in render_report(job)


def test_two_batch_sizes_slow_in_one_night_charge_the_default_the_smaller_slowdown(sim, tmp_path):
    run, _ = sim
    before = load_job(run).summary
    slow = tmp_path / run.name
    shutil.copytree(run, slow)
    records = read_history(slow)
    # Two batch sizes that converged before run slow in one new night: 3x and 2x their last run's pace.
    by_bs = {}
    for r in records:
        if r.reached and r.observed and r.epochs > 0:
            by_bs[r.batch_size] = r
    (a, b), night = list(by_bs.values())[-2:], records[-1].recurrence + 1
    first = dataclasses.replace(
        a, recurrence=night, trial=records[-1].trial + 1, cost=a.cost * 3, energy=a.energy * 3, time=a.time * 3
    )
    first = dataclasses.replace(first, stop_reason="cost_threshold", reached=False)
    second = dataclasses.replace(
        b, recurrence=night, trial=records[-1].trial + 2, cost=b.cost * 2, energy=b.energy * 2, time=b.time * 2
    )
    with open(slow / "history.jsonl", "a", encoding="utf-8") as f:
        for r in (first, second):
            f.write(json.dumps(r.to_json()) + "\n")
    after = load_job(slow).summary
    base = before.baseline
    assert base is not None and before.baseline_cost is not None and after.baseline_cost is not None
    # Pace is cost per epoch against each batch size's median: the evidence supports at most the smaller.
    charged = after.charged_slow[night]
    assert 1.3 < charged <= 2.0 * 1.05
    assert after.baseline_cost == pytest.approx(before.baseline_cost + charged * base.cost)
    calm = after.saved_without_slow["cost"]
    assert calm is not None and calm.value == pytest.approx(before.savings_cost)


def test_max_slowdown_calls_no_noise_free_recurrence_slow(tmp_path):
    from tests.conftest import TRACES

    out = tmp_path / "runs"
    args = ["simulate", "imagenet", "--traces", str(TRACES), "--gpu", "v100", "--horizon", "70"]
    res = CliRunner().invoke(app, [*args, "--objective", "max-slowdown=1.1", "--run-dir", str(out)])
    assert res.exit_code == 0, res.output
    (run,) = out.iterdir()
    job = load_job(run)
    assert job.summary.slow == {}  # 24 of 70 were called slow when the pace included the bound's penalty
    from zeus_run.views.report import render_report

    assert "max-slowdown 1.1: cost = energy + 10 x max power" in render_report(job)
