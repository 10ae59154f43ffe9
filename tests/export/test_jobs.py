"""``zeus-run history runs/*``: one line per job and a total, over real and simulated run directories."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.export.helpers import real_run, simulated_run, zeus
from zeus_run.views.jobs import expand_run_dirs, job_rows, load_job, total_row

# One xdist worker runs the whole module and its module-scoped fixture (`.ci/run`: -n 2 --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_jobs")


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    """runs/ with two real jobs (3 and 2 recurrences) and one simulated (8)."""
    tmp = tmp_path_factory.mktemp("jobs")
    a = real_run(tmp, "alpha", 3)
    b = real_run(tmp, "beta", 2)
    s = simulated_run(tmp)
    return tmp / "runs", [a, b, s]


def test_history_of_three_run_directories_has_one_line_per_job_and_a_total(three_runs):
    _runs, dirs = three_runs
    out = zeus("history", *map(str, dirs), "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    by_job = {row["job"]: row for row in data["jobs"]}
    assert list(by_job) == ["alpha", "beta", "squad"]
    assert by_job["alpha"]["recurrences"] == 3 and by_job["beta"]["recurrences"] == 2
    assert by_job["squad"]["kind"] == "simulated" and by_job["alpha"]["kind"] == "real"
    total = data["total"]
    assert total["recurrences"] == sum(r["recurrences"] for r in data["jobs"])
    assert total["energy"] == pytest.approx(sum(r["energy"] for r in data["jobs"]))
    assert total["cost"] == pytest.approx(sum(r["cost"] for r in data["jobs"]))
    # Each job's figures are the summary's own (the same as `history RUN_DIR`).
    single = json.loads(zeus("history", str(dirs[0]), "--format", "json").stdout)["summary"]
    assert by_job["alpha"]["cost"] == pytest.approx(single["total_cost"])
    assert by_job["alpha"]["batch_size"] in (1, 2, 4) and by_job["alpha"]["outcome"] == "reached"


def test_a_folder_of_run_directories_reads_as_its_jobs_in_every_format(three_runs):
    runs, _dirs = three_runs
    table = zeus("history", str(runs))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == "3 job(s)"
    body = [line for line in lines if line.split(" ")[0] in ("alpha", "beta", "squad", "total")]
    assert [line.split()[0] for line in body] == ["alpha", "beta", "squad", "total"]
    assert "(simulated)" in body[2] and "~" in body[0]  # the real runs' energy is an estimate
    rows = list(csv.DictReader(io.StringIO(zeus("history", str(runs), "--format", "csv").stdout)))
    assert [r["job"] for r in rows] == ["alpha", "beta", "squad", "total"]
    assert int(rows[-1]["recurrences"]) == 3 + 2 + 8


def test_total_saving_weighs_each_job_by_its_own_baseline(three_runs):
    _, dirs = three_runs
    jobs = [load_job(d) for d in expand_run_dirs(dirs)]
    total = total_row(jobs)
    base = sum(j.summary.baseline_cost for j in jobs if j.summary.baseline_cost is not None)
    # the recurrences the savings compare (converged, not slow), all their tries
    spent = sum(j.summary.compared_cost for j in jobs if j.summary.baseline_cost is not None)
    assert total["saving_cost"] == pytest.approx(1 - spent / base)
    assert [r["job"] for r in job_rows(jobs)] == ["alpha", "beta", "squad"]


def test_bad_paths_are_usage_errors_that_name_them(tmp_path, three_runs):
    _, dirs = three_runs
    (tmp_path / "empty").mkdir()
    out = zeus("history", str(dirs[0]), str(tmp_path / "empty"))
    assert out.returncode == 2 and "holds no run directory" in out.stderr and "Traceback" not in out.stderr
    out = zeus("history", str(dirs[0]), str(dirs[0]))
    assert out.returncode == 2 and "named twice" in out.stderr
    out = zeus("history", str(dirs[0]), str(tmp_path / "nope"))
    assert out.returncode == 2 and "nope" in out.stderr


def test_plot_of_many_jobs_draws_one_figure(three_runs, tmp_path):
    pytest.importorskip("matplotlib")
    runs, _ = three_runs
    png = tmp_path / "savings.png"
    out = zeus("plot", str(runs), "-o", str(png))
    assert out.returncode == 0, out.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cumulative_savings_follow_the_summary(three_runs):
    from zeus_run.views.plot_jobs import cumulative_savings

    _, dirs = three_runs
    job = load_job(dirs[2])
    series = cumulative_savings(job)
    assert len(series) == len(job.summary.recurrence_costs)
    assert series[-1] == pytest.approx(job.summary.savings_cost)  # it ends at the whole history's saving
    assert series[-1] == pytest.approx(
        1 - sum(job.summary.recurrence_costs) / (job.summary.default_mean_cost * len(series))
    )


def test_each_saving_has_its_interval_beside_it_and_same_name_rows_are_told_apart(three_runs, tmp_path):
    import shutil

    _, dirs = three_runs
    copy = tmp_path / "srv" / dirs[0].name
    shutil.copytree(dirs[0], copy)
    out = json.loads(zeus("history", str(dirs[0]), str(copy), str(dirs[2]), "--format", "json").stdout)
    for row in [*out["jobs"], out["total"]]:
        for key in ("saving_cost", "saving_energy", "saving_time", "steady_saving", "saving_carbon", "saving_money"):
            assert f"{key}_ci" in row, key
    squad = out["jobs"][2]
    assert squad["saving_cost_ci"] == list(load_job(dirs[2]).summary.savings_cost_ci)
    rows = list(csv.DictReader(io.StringIO(zeus("history", str(dirs[2]), str(dirs[0]), "--format", "csv").stdout)))
    assert float(rows[0]["saving_cost_ci_low"]) == pytest.approx(squad["saving_cost_ci"][0])
    assert "saving_cost_ci" not in rows[0]
    table = zeus("history", str(dirs[0]), str(copy)).stdout
    alpha = [line for line in table.splitlines() if line.startswith("alpha")]
    assert len(alpha) == 2 and alpha[0] != alpha[1]  # two run directories of one name: each shows its own
    assert str(dirs[0]) in alpha[0] and str(copy) in alpha[1]
