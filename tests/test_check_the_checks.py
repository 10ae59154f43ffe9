"""scripts/check_the_checks.py's own parts: a plant counts as caught only by an assertion of a named test (issue 54,
item 5), a moved anchor says so, and the plant's tree shares the one copy without writing through it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


ctc = _load("check_the_checks")

TESTS = """
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("a fixture that crashes")

def test_asserts():
    assert 1 + 1 == 3, "one and one"

def test_raises():
    {}["missing"]

def test_fixture_crash(broken):
    pass

def test_passes():
    pass

def test_skips():
    pytest.skip("not here")

@pytest.mark.parametrize("x", [1, 2])
def test_param(x):
    assert x == 1
"""


def test_only_an_assertion_of_the_named_test_catches(tmp_path):
    (tmp_path / "test_kinds.py").write_text(textwrap.dedent(TESTS))
    nodes = [f"test_kinds.py::{n}" for n in ("test_asserts", "test_raises", "test_fixture_crash", "test_passes")]
    nodes += ["test_kinds.py::test_skips", "test_kinds.py::test_param", "test_kinds.py::test_never_written"]
    report = tmp_path / "report.xml"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "-o", "addopts="]
    subprocess.run([*argv, "-o", "junit_family=xunit1", f"--junitxml={report}", *nodes[:6]], cwd=tmp_path, check=False)
    got = ctc.junit_verdicts(report, nodes)
    assert {n.split("::")[1]: v[0] for n, v in got.items()} == {
        "test_asserts": ctc.ASSERTION,
        "test_raises": ctc.BROKE,  # a KeyError is a crash, not a check that saw the bug
        "test_fixture_crash": ctc.BROKE,
        "test_passes": ctc.PASSED,
        "test_skips": ctc.BROKE,
        "test_param": ctc.ASSERTION,  # a node without its parameters: every case, one of which asserts
        "test_never_written": ctc.BROKE,
    }
    assert "one and one" in got["test_kinds.py::test_asserts"][1]
    assert "error" in got["test_kinds.py::test_fixture_crash"][1]


def test_a_plant_goes_into_its_own_tree_and_a_moved_anchor_says_it_did_not_apply(tmp_path):
    base = tmp_path / "base"
    (base / "pkg").mkdir(parents=True)
    (base / "pkg" / "mod.py").write_text("x = 1\n")
    plant = ctc.Plant("k", "bug", "pkg/mod.py", "x = 1\n", "x = 2\n", ())
    tree = ctc.link_tree(base, tmp_path / "planted")
    ctc.apply(plant, tree)
    assert (tree / "pkg" / "mod.py").read_text() == "x = 2\n"
    assert (base / "pkg" / "mod.py").read_text() == "x = 1\n"  # the shared copy is left as it was
    moved = ctc.Plant("m", "bug", "pkg/mod.py", "y = 1\n", "y = 2\n", ())
    try:
        ctc.apply(moved, ctc.link_tree(base, tmp_path / "moved"))
    except ctc.AnchorError as exc:
        assert "plant did not apply" in str(exc)
    else:
        raise AssertionError("a moved anchor was applied")


def test_every_plant_names_checks_that_exist_and_anchors_that_apply():
    for plant in ctc.PLANTS:
        assert set(plant.checks(quick=False)) <= set(ctc.CHECKS), plant.key
        assert (REPO / plant.path).read_text(encoding="utf-8").count(plant.anchor) == 1, (
            f"{plant.key}: plant did not apply ({plant.path} moved): re-anchor it"
        )
        node = ctc.CHECKS[plant.quick[0]]
        assert node == "job_life" or (REPO / node.split("::")[0]).exists(), node
    assert {Path(p.path).parts[1] for p in ctc.PLANTS} >= {"views", "rundir", "server", "energy"}
