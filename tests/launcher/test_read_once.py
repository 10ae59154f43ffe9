"""A trigger reads its run directory's ``spec.yaml`` once (issue 48): locate, open and run share what was read."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.launcher.test_faults import spec_text
from zeus_run.launcher import run_job
from zeus_run.rundir.settings import SPEC_NAME, read_once, read_settings
from zeus_run.rundir.store import RunDir
from zeus_run.spec import load_spec

_OPENED: list[str] = []


def _hook(event: str, args: tuple) -> None:
    if event == "open" and str(args[0]).endswith(SPEC_NAME):
        _OPENED.append(str(args[0]))


sys.addaudithook(_hook)  # an audit hook cannot be removed: it only counts opens of files named spec.yaml


@pytest.fixture
def opened():
    _OPENED.clear()
    return _OPENED


def _reads(paths: list[str], run_dir: Path) -> int:
    return sum(1 for p in paths if Path(p) == run_dir / SPEC_NAME)


def test_a_resumed_trigger_reads_spec_yaml_once(write_spec, opened):
    spec = load_spec(write_spec(spec_text()))
    first = run_job(spec, next_recurrences=1)
    opened.clear()
    second = run_job(spec, next_recurrences=1)  # resumes: locate checks it, open_job notes rates, the engine
    assert second.resumed and len(second.new) >= 1 and second.run_dir == first.run_dir
    assert _reads(opened, second.run_dir.absolute()) == 1


def test_within_a_trigger_a_write_is_read_again_and_outside_every_call_reads(tmp_path, write_spec, opened):
    spec = load_spec(write_spec(spec_text()))
    with RunDir.open(tmp_path / "runs") as rd:
        rd.save_spec(spec)
        with read_once():
            assert read_settings(rd.path)["name"] == "f"
            read_settings(rd.path)
            assert _reads(opened, rd.path.absolute()) == 1
            rd.save_spec(spec.with_overrides(recurrences=7))  # this process wrote it: read afresh
            assert read_settings(rd.path)["recurrences"] == 7
            assert _reads(opened, rd.path.absolute()) == 2
        read_settings(rd.path)
        read_settings(rd.path)
        assert _reads(opened, rd.path.absolute()) == 4
