"""Every view counts the same, and a bad night never raises the saving (issue 47, items 1 and 4).

A simulated life on the paper's traces gets bad nights appended to its history.jsonl: a night where every try
runs out of memory (the default included), a night lost to the cluster, an interrupted try before a good run.
The counts each view prints (``history`` text, JSON and CSV, the plot's title, the report and the Prometheus
export) are recomputed here from history.jsonl itself, read with ``json``, not through zeus-run's accounting.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from zeus_run.cli import app
from zeus_run.export import exposition
from zeus_run.rundir.history import read_history
from zeus_run.views.jobs import load_job

pytestmark = [pytest.mark.usefixtures("traces_dir"), pytest.mark.xdist_group("test_every_view_counts")]

OOM = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"


@pytest.fixture(scope="module")
def life(tmp_path_factory) -> Path:
    from tests.conftest import TRACES

    if not (TRACES / "summary_train.csv").exists():
        pytest.skip("../shared/traces is not beside this checkout")
    out = tmp_path_factory.mktemp("life") / "runs"
    args = ["simulate", "cifar100", "--traces", str(TRACES), "--gpu", "v100", "--horizon", "20"]
    res = CliRunner().invoke(app, [*args, "--run-dir", str(out)])
    assert res.exit_code == 0, res.output
    (run,) = out.iterdir()
    return run


def _append(run: Path, records) -> None:
    with open(run / "history.jsonl", "a", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r.to_json()) + "\n")


def _oom_night(records, night: int, sizes: list[int]) -> list:
    """Each of ``sizes`` tried once in recurrence ``night``, each dying of an OOM after a tenth of a run."""
    last, out = records[-1], []
    for k, bs in enumerate(sizes):
        out.append(
            dataclasses.replace(
                last,
                recurrence=night,
                trial=last.trial + 1 + k,
                attempt=k + 1,
                batch_size=bs,
                epochs=0,
                cost=last.cost / 10,
                energy=last.energy / 10,
                time=last.time / 10,
                reached=False,
                stop_reason="crashed",
                message=OOM,
                cause=OOM,
                exit_code=1,
            )
        )
    return out


def test_a_night_that_produced_no_model_never_raises_the_saving(life, tmp_path):
    run = tmp_path / life.name
    shutil.copytree(life, run)
    before = load_job(run).summary
    records = read_history(run)
    b0 = before.default_batch_size
    assert b0 is not None and before.savings_cost is not None and before.saved_without_slow == {}
    others = sorted({r.batch_size for r in records} - {b0}, reverse=True)
    # Every try dies with an OOM, the default included (max_tries 3: a larger one, the default, another).
    _append(run, _oom_night(records, records[-1].recurrence + 1, [others[0], b0, others[-1]]))
    after = load_job(run).summary
    assert after.savings_cost is not None and after.savings_energy is not None and after.savings_time is not None
    assert after.savings_cost <= before.savings_cost
    assert after.savings_energy <= (before.savings_energy or 0.0) + 1e-12
    assert after.savings_time <= (before.savings_time or 0.0) + 1e-12
    assert after.compared_recurrences == before.compared_recurrences  # no default run for a night with no model
    assert after.failed_recurrences == 1
    # A failed night where the default never ran (only a larger batch size, once): still no higher.
    again = read_history(run)
    _append(run, _oom_night(again, again[-1].recurrence + 1, [others[0]]))
    last = load_job(run).summary
    assert last.savings_cost is not None and last.savings_cost <= after.savings_cost
    text = CliRunner().invoke(app, ["history", str(run)]).stdout
    assert "2 without a model" in text and f"{others[0]}(failed)" in text


def _raw(run: Path) -> list[dict]:
    with open(run / "history.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_history_plot_report_and_prometheus_count_the_same(life, tmp_path):
    from zeus_run.views.plot import _title
    from zeus_run.views.report import render_report

    run = tmp_path / life.name
    shutil.copytree(life, run)
    records = read_history(run)
    b0 = records[0].batch_size
    night = records[-1].recurrence + 1
    bad = _oom_night(records, night, [b0, b0])
    lost = dataclasses.replace(bad[0], recurrence=night + 1, trial=bad[-1].trial + 1, stop_reason="infrastructure")
    cut = dataclasses.replace(records[-1], recurrence=night + 2, trial=lost.trial + 1, stop_reason="interrupted")
    cut = dataclasses.replace(cut, reached=False, epochs=1)
    good = dataclasses.replace(records[-1], recurrence=night + 2, trial=cut.trial + 1, attempt=2)
    _append(run, [*bad, lost, cut, good])

    raw = _raw(run)
    n_rec, n_trials = len({r["recurrence"] for r in raw}), len(raw)
    per_bs = collections.Counter(r["batch_size"] for r in raw)
    reached = {r["recurrence"] for r in raw if r["reached"]}
    ran = sorted({r["recurrence"] for r in raw if r["stop_reason"] not in ("interrupted", "infrastructure")})
    counted = f"{n_rec} recurrences, {n_trials} trials"

    # history --format json
    hist = CliRunner().invoke(app, ["history", str(run), "--format", "json"])
    assert hist.exit_code == 0, hist.output
    data = json.loads(hist.stdout)
    s = data["summary"]
    assert (s["recurrences"], s["trials"], len(data["trials"])) == (n_rec, n_trials, n_trials)
    assert s["converged"] == len(reached) < n_rec  # the other count, under its own name
    assert "all_recurrences" not in s  # one word, one count
    assert {b["batch_size"]: b["trials"] for b in s["by_batch_size"]} == dict(per_bs)
    assert [n["recurrence"] for n in s["nights"]] == sorted({r["recurrence"] for r in raw})
    # history text: the same counts, and a failed night in "chosen over time" in its place
    text = CliRunner().invoke(app, ["history", str(run)]).stdout
    assert counted in text
    chosen = re.search(r"Batch size chosen over time: (.*)", text)
    assert chosen is not None and len(chosen.group(1).split()) == len(ran)
    assert chosen.group(1).split()[ran.index(night)] == f"{b0}(failed)"
    # history --format csv: one row per trial
    rows = list(csv.DictReader(io.StringIO(CliRunner().invoke(app, ["history", str(run), "--format", "csv"]).stdout)))
    assert len(rows) == n_trials and collections.Counter(int(r["batch_size"]) for r in rows) == per_bs
    # the plot's title
    job = load_job(run)
    assert _title(job.records, job.summary).split(": ", 1)[1].startswith(counted)
    # the report: the same phrase, and each batch size's trials in its table
    html = render_report(job)
    assert counted in html
    table = html.split("<h2>Per batch size</h2>", 1)[1].split("</table>", 1)[0]
    cells = re.findall(r"<tr><td>(\d+)</td><td>(\d+)</td>", table)
    assert {int(b): int(t) for b, t in cells} == dict(per_bs)
    # Prometheus
    prom = exposition([job])
    assert float(re.search(r"^zeus_run_recurrences\{[^}]*\} (\S+)$", prom, re.M).group(1)) == n_rec
    by_outcome = re.findall(r"^zeus_run_trials_total\{[^}]*\} (\S+)$", prom, re.M)
    assert sum(float(v) for v in by_outcome) == n_trials
    exported = re.findall(r'^zeus_run_batch_size_trials_total\{[^}]*batch_size="(\d+)"[^}]*\} (\S+)$', prom, re.M)
    assert {int(b): float(v) for b, v in exported} == {b: float(n) for b, n in per_bs.items()}
