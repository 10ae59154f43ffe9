"""The ``start`` spec section: accepted forms, and errors that name the field, the value and the fix (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.factories import job_spec, zeus_run_cli
from zeus_run.errors import SpecError
from zeus_run.spec import load_spec, parse_spec


def _spec(tmp_path: Path, start: str) -> Path:
    (tmp_path / "grid.csv").write_text("timestamp,value\n2026-01-01T00:00:00Z,300\n")
    path = tmp_path / "job.yaml"
    path.write_text(job_spec(f"start: {start}\n"))
    return path


def test_no_start_section_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(job_spec())
    spec = load_spec(path)
    assert not spec.start.enabled
    assert parse_spec(path.read_text().replace("name: t", "name: t2"), source=path).start == spec.start


def test_the_forms_it_accepts(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, '{by: "07:00", forecast: {csv: grid.csv}, min_saving: 0.05}'))
    assert spec.start.enabled and spec.start.by == "07:00" and spec.start.min_saving == 0.05
    assert spec.start.forecast == "csv:" + str((tmp_path / "grid.csv").resolve())
    assert load_spec(_spec(tmp_path, "{within: 8h, forecast: persistence}")).start.within == "8h"
    assert load_spec(_spec(tmp_path, "{within: 1h30m, forecast: none}")).start.forecast == "none"
    provider = load_spec(_spec(tmp_path, "{by: '06:30', forecast: {provider: electricitymaps, zone: GB}}"))
    assert provider.start.forecast == "provider:electricitymaps/GB"


@pytest.mark.parametrize(
    ("start", "field", "words"),
    [
        ('{by: "25:00"}', "start.by", "not a time of day HH:MM"),
        ("{by: 7}", "start.by", "must be a time of day"),
        ("{within: soon}", "start.within", "not a duration"),
        ('{by: "07:00", within: 8h}', "start.within", "together with start.by"),
        ("{forecast: persistence}", "start.by", "needs a deadline"),
        ('{by: "07:00", forecast: {csv: nowhere.csv}}', "start.forecast.csv", "names no file"),
        ('{by: "07:00", forecast: {provider: acme}}', "start.forecast.provider", "must be one of"),
        ('{by: "07:00", forecast: tomorrow}', "start.forecast", "is not a forecast source"),
        ('{by: "07:00", min_saving: 2}', "start.min_saving", "at most 0.99"),
        ('{by: "07:00", wait: 1}', "start.wait", "unknown key"),
    ],
)
def test_each_error_names_the_field_and_the_fix(tmp_path: Path, start: str, field: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(_spec(tmp_path, start))
    problems = [p for p in info.value.problems if p.field == field]
    assert problems, info.value
    assert words in problems[0].why and (problems[0].fix or field == "start.wait")
    assert info.value.exit_code == 2


def test_check_exits_2_with_the_field_named_and_no_traceback(tmp_path: Path) -> None:
    result = zeus_run_cli("check", _spec(tmp_path, '{by: "7 o\'clock"}'))
    assert result.returncode == 2
    assert "start.by" in result.stderr and "HH:MM" in result.stderr and "Traceback" not in result.stderr
