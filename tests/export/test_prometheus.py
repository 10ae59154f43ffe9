"""Prometheus exposition: naming conventions, the format, and the Grafana dashboard's metric names."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import REPO
from tests.export.helpers import real_run, simulated_run, zeus
from zeus_run.export import exposition
from zeus_run.export._prometheus import METRICS
from zeus_run.views.jobs import load_job

DASHBOARD = REPO / "docs" / "grafana-zeus-run.json"
SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
#: PromQL words a dashboard query may hold besides metric names.
PROMQL = {
    "sum",
    "by",
    "without",
    "max",
    "min",
    "avg",
    "rate",
    "increase",
    "label_values",
    "job_name",
    "outcome",
    "quantity",
    "gpu",
    "currency",
    "run_dir",
}


# One xdist worker runs the whole module and its module-scoped fixture (`.ci/run`: -n 2 --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_prometheus")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prom")
    money = "accounting: {carbon_g_per_kwh: 350, price_per_kwh: 0.12, currency: EUR}"
    return [load_job(real_run(tmp, "alpha", 3, export=money)), load_job(simulated_run(tmp))]


def parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by metric name; every line must be a HELP, a TYPE or a sample."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if line.startswith(("# HELP ", "# TYPE ")):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m["labels"]))
        out.setdefault(m["name"], []).append((labels, float(m["value"])))
    return out


def test_metric_names_follow_prometheus_conventions():
    for name, m in METRICS.items():
        assert name.startswith("zeus_run_") and re.fullmatch(r"[a-z_]+", name), name
        assert (m.type == "counter") == name.endswith("_total"), name
        assert not re.search(r"_(kilo|mega)?(joule|second|watt)(_|$)", name), f"{name}: plural base units"
        unitless = (
            "_batch_size",
            "_exploring",
            "_recurrences",
            "_recurrences_total",
            "_recurrences_open",
            "_trials_total",
            "_plans_total",
            "_ratio",
        )
        money = name == "zeus_run_cost_total"  # the unit is the label `currency`
        # A carbon intensity has no base unit: grams of CO2e per kWh, as the grid operators and forecasts state it.
        unit = r"_(joules|seconds|watts|grams|g_per_kwh)(_total)?$"
        assert re.search(unit, name) or name.endswith(unitless) or money, name


def test_exposition_has_each_family_once_with_help_and_type_and_the_job_label(jobs):
    text = exposition(jobs)
    families = re.findall(r"^# TYPE (\S+) (counter|gauge)$", text, flags=re.M)
    assert len(families) == len({name for name, _ in families})
    assert {name for name, _ in families} <= set(METRICS)
    samples = parse(text)
    for name, rows in samples.items():
        assert {labels["job_name"] for labels, _ in rows} <= {"alpha", "squad"}, name
    alpha, squad = jobs
    assert (
        dict((lab["outcome"], v) for lab, v in samples["zeus_run_recurrences_total"] if lab["job_name"] == "alpha")[
            "reached"
        ]
        == 3
    )
    trials = sum(v for lab, v in samples["zeus_run_trials_total"] if lab["job_name"] == "squad")
    assert trials == squad.summary.trials
    energy = {lab["job_name"]: v for lab, v in samples["zeus_run_energy_joules_total"]}
    assert energy["alpha"] == pytest.approx(alpha.summary.total_energy)
    ratios = {lab["quantity"]: v for lab, v in samples["zeus_run_savings_ratio"] if lab["job_name"] == "squad"}
    assert ratios["cost"] == pytest.approx(squad.summary.savings_cost)
    # Power limit only where one was set (the simulated run has one, the CPU job none).
    assert [lab["job_name"] for lab, _ in samples["zeus_run_power_limit_watts"]] == ["squad"]


def test_label_values_are_escaped():
    from zeus_run.export._prometheus import _labels

    assert _labels({"job_name": 'a"b\\c\nd'}) == '{job_name="a\\"b\\\\c\\nd"}'


def test_cli_writes_the_textfile_and_stdout(jobs, tmp_path):
    out = tmp_path / "textfile" / "zeus_run.prom"
    done = zeus("export", "prometheus", str(jobs[0].run_dir), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_text() == exposition([jobs[0]])
    stdout = zeus("export", "prometheus", str(jobs[0].run_dir), str(jobs[1].run_dir))
    assert stdout.returncode == 0 and stdout.stdout == exposition(jobs)


def test_a_bad_push_url_is_a_usage_error(jobs):
    done = zeus("export", "prometheus", str(jobs[0].run_dir), "--push", "localhost:9091")
    assert done.returncode == 2 and "http://" in done.stderr and "Traceback" not in done.stderr


def dashboard_queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    out = [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]
    out += [("variable " + v["name"], v["query"]["query"]) for v in dash["templating"]["list"] if v["type"] == "query"]
    return out


def metric_names(expr: str) -> set[str]:
    """Identifiers in a PromQL expression outside label matchers and strings."""
    bare = re.sub(r'\{[^}]*\}|"[^"]*"', " ", expr)
    return set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare)) - PROMQL


def test_grafana_panels_use_only_metric_names_the_exporter_writes(jobs):
    written = set(parse(exposition(jobs)))
    assert written <= set(METRICS)  # the exporter writes only the families it declares
    # A saving's interval is written where the data bounds one (the real run's 3 recurrences may not): the families
    # the exporter declares are what it writes when it can.
    written |= {name for name in METRICS if name.endswith(("_low_ratio", "_high_ratio"))}
    titles = [title for title, _ in dashboard_queries()]
    for needed in ("Energy saved over time", "Cost per recurrence against the default", "Batch size", "Power limit"):
        assert any(t.startswith(needed) for t in titles), needed
    for title, expr in dashboard_queries():
        names = metric_names(expr)
        assert names, f"{title}: {expr!r} reads no metric"
        assert names <= written, f"{title}: {sorted(names - written)} are not written by zeus-run export prometheus"


def test_the_dashboard_check_catches_an_unknown_metric():
    assert metric_names('sum by (job_name) (zeus_run_energy_kilojoules{job_name=~"$job"})') == {
        "zeus_run_energy_kilojoules"
    }


def test_two_run_directories_of_one_job_are_kept_apart(jobs, tmp_path):
    """`export prometheus runs/demo srv/demo`: two sets of series, told apart by the run_dir label."""
    import shutil

    other = tmp_path / "srv" / jobs[0].run_dir.name
    shutil.copytree(jobs[0].run_dir, other)
    both = [jobs[0], load_job(other)]
    samples = parse(exposition(both))
    energy = {lab["run_dir"]: v for lab, v in samples["zeus_run_energy_joules_total"]}
    assert energy == {
        str(jobs[0].run_dir.resolve()): jobs[0].summary.total_energy,
        str(other.resolve()): energy[str(other.resolve())],
    }
    assert {lab["job_name"] for lab, _ in samples["zeus_run_energy_joules_total"]} == {"alpha"}


def test_counters_never_go_down_between_scrapes(tmp_path):
    """Scrapes of every history prefix (each a state the run directory was in), a retry reaching the target among them."""
    import shutil

    from zeus_run.rundir.history import read_history

    run = real_run(tmp_path, "mono", 4)
    records = read_history(run)
    retried = [
        r.recurrence
        for r in records
        if not r.reached and any(o.reached and o.recurrence == r.recurrence for o in records)
    ]
    assert retried, "the run has no recurrence whose retry reached the target"
    acc = "accounting: {carbon_g_per_kwh: 350, price_per_kwh: 0.12, currency: EUR}\n"
    (run / "spec.yaml").write_text((run / "spec.yaml").read_text() + acc)
    lines = (run / "history.jsonl").read_text().splitlines(keepends=True)
    copy = tmp_path / "scrape" / "mono"
    previous: dict[tuple[str, tuple], float] = {}
    saw_open = False
    for n in range(1, len(lines) + 1):
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(run, copy)
        (copy / "history.jsonl").write_text("".join(lines[:n]))
        scrape = parse(exposition([load_job(copy)]))
        saw_open |= any(v > 0 for _, v in scrape.get("zeus_run_recurrences_open", []))
        now = {
            (name, tuple(sorted(lab.items()))): v
            for name, rows in scrape.items()
            if name.endswith("_total")
            for lab, v in rows
        }
        for key, value in previous.items():
            assert key in now and now[key] >= value, f"{key} went from {value} to {now.get(key)} at line {n}"
        previous = now
    assert saw_open  # a try that did not reach the target, before its retry did
    names = {name for name, _ in previous}
    assert {"zeus_run_carbon_grams_total", "zeus_run_cost_total"} <= names
    assert any(dict(lab).get("currency") == "EUR" for name, lab in previous if name == "zeus_run_cost_total")


def test_every_dashboard_query_keeps_run_directories_apart_and_every_panel_has_a_unit():
    """Two run directories of one job name stay two series in every panel: each query selects `run_dir=~"$run_dir"`
    and each aggregation keeps `run_dir` among its labels; each panel says its unit (none is no unit)."""
    dash = json.loads(DASHBOARD.read_text())
    names = [v["name"] for v in dash["templating"]["list"]]
    assert "run_dir" in names
    run_dir = next(v for v in dash["templating"]["list"] if v["name"] == "run_dir")
    assert run_dir["multi"] and run_dir["includeAll"] and "run_dir" in run_dir["query"]["query"]
    for panel in dash["panels"]:
        unit = panel["fieldConfig"]["defaults"].get("unit")
        assert unit and unit != "none", f"{panel['title']}: no unit"
        for override in panel["fieldConfig"]["overrides"]:
            for prop in override["properties"]:
                if prop["id"] == "unit":
                    assert prop["value"] and prop["value"] != "none", panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            selectors = re.findall(r"\{([^}]*)\}", expr)
            assert selectors, f"{panel['title']}: {expr!r} selects nothing"
            for sel in selectors:
                assert 'run_dir=~"$run_dir"' in sel and 'job_name=~"$job"' in sel, f"{panel['title']}: {expr!r}"
            for by in re.findall(r"\bby\s*\(([^)]*)\)", expr):
                assert "run_dir" in {x.strip() for x in by.split(",")}, f"{panel['title']}: {expr!r} sums run dirs"
            assert "{{run_dir}}" in target["legendFormat"], f"{panel['title']}: series of two run dirs look alike"


def test_the_dashboard_check_catches_a_sum_over_run_directories():
    expr = 'sum by (job_name, outcome) (zeus_run_trials_total{job_name=~"$job",run_dir=~"$run_dir"})'
    by = re.findall(r"\bby\s*\(([^)]*)\)", expr)
    assert by and "run_dir" not in {x.strip() for x in by[0].split(",")}


def test_every_outcome_counter_starts_at_zero_and_savings_carry_their_interval(jobs):
    from zeus_run.contract import StopReason

    samples = parse(exposition(jobs))
    squad = {lab["outcome"]: v for lab, v in samples["zeus_run_trials_total"] if lab["job_name"] == "squad"}
    assert set(squad) == {str(r) for r in StopReason}  # before the first crash, its counter is there at 0
    assert squad["crashed"] == 0
    saved = jobs[1].summary.saved["cost"]
    assert saved is not None and saved.ci is not None
    low = {lab["quantity"]: v for lab, v in samples["zeus_run_savings_low_ratio"] if lab["job_name"] == "squad"}
    high = {lab["quantity"]: v for lab, v in samples["zeus_run_savings_high_ratio"] if lab["job_name"] == "squad"}
    assert (low["cost"], high["cost"]) == pytest.approx(saved.ci)


def test_no_difference_is_exported_as_zero_not_a_rounding_residue():
    from zeus_run.views.saving import Saved

    tiny = Saved(spent=0.1 + 0.2, default=0.3, low=-0.01, high=0.01)  # 1 - 0.30000000000000004 / 0.3
    assert 1.0 - tiny.spent / tiny.default != 0.0 and tiny.value == 0.0
    from zeus_run.views.saving import pct

    assert pct(tiny.value) == "0.0% saved" and pct(-2.2e-16) == "0.0% saved"
