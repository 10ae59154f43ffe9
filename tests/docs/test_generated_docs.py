"""The generated reference pages (job spec, server API) are what the code gives today."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_the_spec_and_api_references_are_current():
    pytest.importorskip("fastapi")
    r = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_docs.py"), "--check"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr  # stale: run python scripts/gen_docs.py and commit the pages


def test_every_spec_field_is_in_the_reference():
    from zeus_run.spec._load import _TOP_KEYS
    from zeus_run.spec._sections import _SECTION_KEYS

    page = (REPO / "docs" / "spec-reference.md").read_text()
    for key in _TOP_KEYS:
        if key in _SECTION_KEYS:
            assert all(f"| `{key}.{sub}` |" in page for sub in _SECTION_KEYS[key]), key
        else:
            assert f"| `{key}` |" in page, key
