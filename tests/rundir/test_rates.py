"""A changed `accounting` section on resume: applied from the recurrence where it appears, with a notice, or refused."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_run_cli import spec_text
from tests.cli.test_run_cli import zeus_in as zeus
from tests.test_accounting import RECORDS
from zeus_run.accounting import J_PER_KWH, AccountingSettings, Period
from zeus_run.errors import RunDirError
from zeus_run.rundir.rates import RATES_NAME, note_change, periods
from zeus_run.views.money import account
from zeus_run.views.summary import summarize


def test_a_changed_rate_starts_a_period_and_names_the_field(tmp_path):
    stored = {"accounting": {"carbon_g_per_kwh": 350, "price_per_kwh": 0.12, "currency": "USD"}}
    same = AccountingSettings(350, 0.12, "USD")
    assert note_change(tmp_path, stored, same, 3) == [] and not (tmp_path / RATES_NAME).exists()
    notices = note_change(tmp_path, stored, AccountingSettings(100, 0.12, "USD"), 3)
    assert notices == [
        "accounting.carbon_g_per_kwh changed from 350 to 100: it applies from recurrence 3 on; the recurrences "
        f"before keep 350 (recorded in {RATES_NAME})"
    ]
    assert periods(tmp_path) == (Period(1, same), Period(3, AccountingSettings(100, 0.12, "USD")))
    # The next launch compares with the period in force, not with the stored spec: nothing new.
    assert note_change(tmp_path, stored, AccountingSettings(100, 0.12, "USD"), 5) == []
    both = note_change(tmp_path, stored, AccountingSettings(100, 0.2, "USD"), 5)
    assert len(both) == 1 and both[0].startswith("accounting.price_per_kwh changed from 0.12 to 0.2")
    assert [p.first for p in periods(tmp_path)] == [1, 3, 5]
    assert note_change(tmp_path, None, AccountingSettings(1, 1, "USD"), 1) != []  # periods recorded: compared
    assert note_change(tmp_path / "new", None, AccountingSettings(1, 1, "USD"), 1) == []  # a new job


def test_a_changed_currency_is_refused_naming_the_field(tmp_path):
    stored = {"accounting": {"price_per_kwh": 0.12, "currency": "USD"}}
    with pytest.raises(RunDirError, match=r"accounting\.currency changed from 'USD' to 'EUR'") as info:
        note_change(tmp_path, stored, AccountingSettings(None, 0.12, "EUR"), 2)
    assert info.value.exit_code == 2 and not (tmp_path / RATES_NAME).exists()
    # Without a price there is no money to keep in one currency.
    assert note_change(tmp_path, {"accounting": {"carbon_g_per_kwh": 1}}, AccountingSettings(1, None, "EUR"), 2) == []


def test_each_recurrence_is_charged_at_its_periods_rate():
    summary = summarize(RECORDS, 8)
    rates = (Period(1, AccountingSettings(carbon_g_per_kwh=400)), Period(2, AccountingSettings(carbon_g_per_kwh=100)))
    acc = account(RECORDS, AccountingSettings(carbon_g_per_kwh=100), summary, periods=rates)
    assert acc is not None
    assert acc.carbon_g == pytest.approx(2 * 400 + 2 * 100)  # recurrence 1: 2 kWh at 400; recurrence 2: 2 kWh at 100
    assert acc.default_carbon_g == pytest.approx(2 * 400 + 2 * 100)  # the default's 2 kWh a recurrence, alike
    assert acc.to_json()["periods"][1] == {
        "from_recurrence": 2,
        "carbon_g_per_kwh": 100,
        "price_per_kwh": None,
        "currency": "USD",
    }
    assert any(line.startswith("Rates: from recurrence 1: carbon 400 g/kWh") for line in acc.lines())


def test_resume_with_a_new_carbon_rate_applies_it_from_the_next_recurrence(write_spec):
    spec = write_spec(spec_text(body="accounting: {carbon_g_per_kwh: 350}"))
    assert zeus("run", str(spec), "--no-output", "--next").returncode == 0
    spec.write_text(spec.read_text().replace("carbon_g_per_kwh: 350", "carbon_g_per_kwh: 100"))
    r = zeus("run", str(spec), "--no-output", "--next")
    assert r.returncode == 0, r.stderr
    assert "accounting.carbon_g_per_kwh changed from 350 to 100: it applies from recurrence 2 on" in r.stderr
    run_dir = spec.parent / "runs"
    h = zeus("history", str(run_dir), "--format", "json")
    out = json.loads(h.stdout)
    energy = {n: sum(t["energy"] for t in out["trials"] if t["recurrence"] == n) for n in (1, 2)}
    acc = out["accounting"]
    assert acc["carbon_g"] == pytest.approx((energy[1] * 350 + energy[2] * 100) / J_PER_KWH)
    assert [p["from_recurrence"] for p in acc["periods"]] == [1, 2]
    text = zeus("history", str(run_dir)).stdout
    assert "Rates: from recurrence 1: carbon 350 g/kWh; from recurrence 2: carbon 100 g/kWh" in text


def test_resume_with_another_currency_is_refused_with_exit_2(write_spec):
    spec = write_spec(spec_text(body="accounting: {price_per_kwh: 0.1, currency: USD}"))
    assert zeus("run", str(spec), "--no-output", "--next").returncode == 0
    spec.write_text(spec.read_text().replace("currency: USD", "currency: EUR"))
    r = zeus("run", str(spec), "--no-output", "--next")
    assert r.returncode == 2 and "accounting.currency changed from 'USD' to 'EUR'" in r.stderr
    assert "Traceback" not in r.stderr
