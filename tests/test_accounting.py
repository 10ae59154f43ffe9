"""Carbon and money: rates, time series, the spec section, history, run summary and plot."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from tests.factories import make_record
from tests.sim_helpers import write_tiny_traces
from zeus_run.accounting import J_PER_KWH, AccountingError, AccountingSettings, Rate, read_series
from zeus_run.cli import app
from zeus_run.errors import SpecError
from zeus_run.records import TrialRecord
from zeus_run.spec import parse_spec
from zeus_run.views.money import account
from zeus_run.views.recommend import Belief
from zeus_run.views.summary import summarize


def _rec(trial: int, recurrence: int, bs: int, energy: float, reached: bool, started: str | None) -> TrialRecord:
    return make_record(
        job="j",
        recurrence=recurrence,
        attempt=1,
        trial=trial,
        batch_size=bs,
        stage="explore",
        epochs=1,
        time=10.0,
        energy=energy,
        max_power=300.0,
        cost=energy,
        reached=reached,
        stop_reason="target_reached" if reached else "cost_threshold",
        started_at=started,
    )


KWH = J_PER_KWH
RECORDS = [
    _rec(0, 1, 8, 2 * KWH, True, "2026-01-01T00:00:00+00:00"),  # b0: 2 kWh
    _rec(1, 2, 16, 1 * KWH, False, "2026-01-01T06:00:00+00:00"),  # early-stopped: 1 kWh
    _rec(2, 2, 16, 1 * KWH, True, "2026-01-01T13:00:00+00:00"),  # 1 kWh
]


def test_constant_rates_and_saving_against_the_default():
    summary = summarize(RECORDS, 8)
    acc = account(RECORDS, AccountingSettings(carbon_g_per_kwh=400, price_per_kwh=0.5, currency="EUR"), summary)
    assert acc is not None
    assert acc.carbon_g == pytest.approx(4 * 400) and acc.money == pytest.approx(4 * 0.5)
    # Two recurrences at the baseline's 2 kWh each.
    assert acc.default_carbon_g == pytest.approx(4 * 400) and acc.money_saving == pytest.approx(0.0)
    lines = acc.lines()
    assert lines[0].startswith("Carbon: 1.6 kg CO2e against the default's 1.6 kg CO2e: no measurable difference yet")
    assert lines[1].startswith("Money: 2.00 EUR against the default's 2.00 EUR: no measurable difference yet")
    assert account(RECORDS, AccountingSettings(), summary) is None
    # A slow recurrence counts in full on zeus-run's side; one batch size's slow tries are no evidence that the
    # machine ran slow, so the default is charged its usual energy there (docs/savings.md).
    slow = summarize(RECORDS, 8, belief=Belief(None, {2: 2.0}))
    acc = account(RECORDS, AccountingSettings(carbon_g_per_kwh=400), slow)
    assert acc is not None and acc.carbon_g == pytest.approx(1600)
    assert acc.default_carbon_g == pytest.approx((2 + 2) * 400) and acc.carbon_saving == pytest.approx(0.0)
    # Totals alone without a summary.
    bare = account(RECORDS, AccountingSettings(carbon_g_per_kwh=400), None)
    assert bare is not None and bare.carbon_g == pytest.approx(1600) and bare.carbon is None


def test_small_figures_read_with_a_prefix_and_no_exponent():
    from zeus_run import _units

    assert _units.carbon(7.457e-3) == "7.457 mg CO2e"
    assert _units.carbon(1234.0) == "1.234 kg CO2e" and _units.carbon(12.3) == "12.3 g CO2e"
    assert _units.money(0.0000123, "EUR") == "0.0000123 EUR" and _units.money(12.345, "USD") == "12.35 USD"
    assert _units.quantity(27610.0, "J") == "27.61 kJ" and "e-" not in _units.carbon(2e-9)


def test_time_series_charges_the_rate_in_force_at_each_start(tmp_path):
    csv_path = tmp_path / "grid.csv"
    csv_path.write_text("timestamp,value\n2026-01-01T12:00:00Z,100\n2026-01-01T00:00:00,500\n")
    rate = read_series(csv_path)
    assert rate.at("2025-12-31T00:00:00+00:00") == 500  # before the series: its first row
    assert rate.at("2026-01-01T11:59:59+00:00") == 500 and rate.at("2026-01-01T12:00:00+00:00") == 100
    assert rate.at(None) == 300  # no start time (simulated): the mean
    acc = account(RECORDS, AccountingSettings(carbon_g_per_kwh="grid.csv"), summarize(RECORDS, 8), base=tmp_path)
    assert acc is not None
    assert acc.carbon_g == pytest.approx(2 * 500 + 1 * 500 + 1 * 100)
    assert acc.default_carbon_g == pytest.approx(2 * 500 + 2 * 500)  # recurrence 2 started at 06:00
    assert acc.carbon_saving == pytest.approx(1 - 1.6 / 2.0)
    assert Rate.of(350).at("2026-01-01T00:00:00Z") == 350


@pytest.mark.parametrize(
    ("text", "needle"),
    [("2026-01-01T00:00:00Z,1\nyesterday,5\n", "line 2:"), ("t,v\n", "no timestamp"), ("2026-01-01,-3\n", "line 1:")],
)
def test_bad_series_names_the_line(tmp_path, text, needle):
    p = tmp_path / "s.csv"
    p.write_text(text)
    with pytest.raises(AccountingError, match=needle):
        read_series(p)
    with pytest.raises(AccountingError, match="Cannot read"):
        read_series(tmp_path / "missing.csv")


def _spec(extra: str) -> str:
    return f"name: j\ncommand: [python, t.py]\nbatch_sizes: [8, 16]\ndefault_batch_size: 8\ntarget_metric: 0.5\n{extra}"


def test_spec_section(tmp_path):
    spec = parse_spec(_spec("accounting: {carbon_g_per_kwh: 350, price_per_kwh: 0.12, currency: USD}\n"))
    assert spec.accounting == AccountingSettings(350.0, 0.12, "USD")
    (tmp_path / "grid.csv").write_text("2026-01-01T00:00:00Z,300\n")
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(_spec("accounting: {carbon_g_per_kwh: grid.csv}\n"))
    from zeus_run.spec import load_spec

    assert load_spec(spec_file).accounting.carbon_g_per_kwh == str((tmp_path / "grid.csv").resolve())
    with pytest.raises(SpecError) as info:
        parse_spec(_spec("accounting: {carbon_g_per_kwh: -1, price_per_kwh: nofile.csv, cost: 3}\n"))
    fields = {p.field for p in info.value.problems}
    assert fields == {"accounting.carbon_g_per_kwh", "accounting.price_per_kwh", "accounting.cost"}


@pytest.fixture
def sim_run(tmp_path):
    traces = write_tiny_traces(tmp_path / "traces")
    res = CliRunner().invoke(
        app, ["simulate", "squad", "--traces", str(traces), "--gpu", "tiny", "--run-dir", str(tmp_path / "runs")]
    )
    assert res.exit_code == 0, res.output
    run = next((tmp_path / "runs").iterdir())
    spec = yaml.safe_load((run / "spec.yaml").read_text())
    spec["accounting"] = {"carbon_g_per_kwh": 350, "price_per_kwh": 0.12, "currency": "USD"}
    (run / "spec.yaml").write_text(yaml.safe_dump(spec))
    return run


def test_history_shows_carbon_and_money(sim_run):
    res = CliRunner().invoke(app, ["history", str(sim_run)])
    assert res.exit_code == 0, res.output
    assert "Carbon: " in res.stdout and "g CO2e against the default's" in res.stdout
    assert "USD against the default's" in res.stdout
    assert "e-0" not in res.stdout
    res = CliRunner().invoke(app, ["history", str(sim_run), "--format", "json"])
    acc = json.loads(res.stdout)["accounting"]
    energy = sum(t["energy"] for t in json.loads(res.stdout)["trials"])
    assert acc["carbon_g"] == pytest.approx(energy / J_PER_KWH * 350)
    assert acc["currency"] == "USD" and acc["money_saving"] is not None


def test_history_reports_a_broken_series_in_one_line(sim_run):
    spec = yaml.safe_load((sim_run / "spec.yaml").read_text())
    spec["accounting"] = {"carbon_g_per_kwh": str(sim_run / "gone.csv")}
    (sim_run / "spec.yaml").write_text(yaml.safe_dump(spec))
    res = CliRunner().invoke(app, ["history", str(sim_run)])
    assert res.exit_code == 2 and "Cannot read the rate series" in res.output and "Traceback" not in res.output


def test_plot_title_shows_carbon_and_money(sim_run, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    from zeus_run.rundir.history import read_history
    from zeus_run.views.plot import plot_history

    records = read_history(sim_run / "history.jsonl")
    acc = account(records, AccountingSettings(350, 0.12), None)
    assert acc is not None and acc.carbon_g is not None
    seen: list[str] = []
    import matplotlib.figure

    original = matplotlib.figure.Figure.suptitle

    def spy(self, text, **kw):
        seen.append(text)
        return original(self, text, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "suptitle", spy)
    plot_history(records, tmp_path / "p.png", accounting=acc)
    assert (tmp_path / "p.png").is_file() and "g CO2e" in seen[0] and "USD" in seen[0]


def test_history_on_a_file_that_is_no_csv_prints_no_line_of_it(sim_run):
    """A spec that points `accounting` at some other file (a secret, say): `history` names the file and the line
    number, never what the line holds."""
    (sim_run / "secret.csv").write_text("2026-01-01T00:00:00Z,1\nroot:x:0:0:TOPSECRET-LINE:/root:/bin/bash\n")
    spec = yaml.safe_load((sim_run / "spec.yaml").read_text())
    spec["accounting"] = {"carbon_g_per_kwh": "secret.csv"}
    (sim_run / "spec.yaml").write_text(yaml.safe_dump(spec))
    for fmt in ("table", "json", "csv"):
        res = CliRunner().invoke(app, ["history", str(sim_run), "--format", fmt])
        assert res.exit_code == 2 and "Traceback" not in res.output
        assert "'secret.csv', line 2" in res.output
        assert "TOPSECRET" not in res.output and "root:x" not in res.output


def test_a_trial_across_a_step_in_intensity_is_charged_each_side_for_its_own_time(tmp_path):
    csv_path = tmp_path / "grid.csv"  # 500 g/kWh until 01:00, then 100
    csv_path.write_text("timestamp,value\n2026-01-01T00:00:00Z,500\n2026-01-01T01:00:00Z,100\n")
    rec = dict(job="j", stage="explore", epochs=1, time=3600.0, max_power=300.0, cost=1.0, reached=True)
    records = [  # b0, one hour from 00:30 to 01:30: half at 500, half at 100
        make_record(
            0,
            recurrence=1,
            batch_size=8,
            energy=2 * KWH,
            started_at="2026-01-01T00:30:00Z",
            ended_at="2026-01-01T01:30:00Z",
            **rec,
        ),
        # 45 minutes from 00:45: a quarter of the hour at 500, half at 100
        make_record(
            1,
            recurrence=2,
            batch_size=16,
            energy=1 * KWH,
            started_at="2026-01-01T00:45:00Z",
            ended_at="2026-01-01T01:30:00Z",
            **rec,
        ),
    ]
    acc = account(records, AccountingSettings(carbon_g_per_kwh="grid.csv"), base=tmp_path)
    assert acc is not None
    assert acc.carbon_g == pytest.approx(2 * 300 + 1 * (500 * 15 + 100 * 30) / 45)
    assert read_series(csv_path).over("2026-01-01T00:30:00Z", "2026-01-01T01:30:00Z") == pytest.approx(300)
    assert read_series(csv_path).over("2026-01-01T00:30:00Z") == 500  # no end: the rate at its start
