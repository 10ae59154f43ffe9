"""The documentation's examples run as written (marker ``docs``).

The convention, for pages under ``docs/`` and the README:

* a fenced block whose info string has ``title="NAME"`` (```` ```python title="train.py" ````) is a
  file: it is written to NAME, in the page's working directory, when the page reaches it;
* a ```` ```bash ```` block right after a line ``<!-- docs-test -->`` is run by ``bash -e`` in that
  directory (blocks of one page run in order and share it);
* a ```` ```text ```` block right after a tested block (blank lines between are fine) is its sample
  output, compared loosely: every line must appear in the output, in order (other lines may come
  between), numbers match any number, ``~`` is optional, ``J``/``kJ``/``MJ`` and ``s``/``min``/``h`` are one unit each, a rule of dashes matches any width, runs of spaces are one space, ``...``
  inside a line matches anything, and a line that is only ``...`` stands for lines left out.

The working directory holds copies of ``configs/`` and ``scripts/`` and a ``.venv`` that links to
the interpreter running the tests, whose ``bin`` is first on PATH (so ``zeus-run`` and
``.venv/bin/zeus-run`` both work). ``PYTHONUNBUFFERED`` is removed from the environment: users'
machines do not set it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [*sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]
_FENCE = re.compile(r"^(`{3,})(\S*)(.*)$")
#: Units a figure may change to as it grows (0.9 kJ where the sample says 905 J).
_UNIT = re.compile(r"(?<=0 )(kJ|MJ|GJ|min|h)\b")
_TITLE = re.compile(r'title="([^"]+)"')
_NUMBER = re.compile(r"[-+]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?")


@dataclass
class Block:
    kind: str  # "file", "run" or "expect"
    text: str
    line: int
    name: str = ""


def blocks(page: Path) -> list[Block]:
    """The page's files, tested commands and sample outputs, in order."""
    out: list[Block] = []
    lines = page.read_text().splitlines()
    i, marked, after_run = 0, False, False
    while i < len(lines):
        m = _FENCE.match(lines[i].strip())
        if not m:
            stripped = lines[i].strip()
            if stripped == "<!-- docs-test -->":
                marked = True
            elif stripped:
                marked = after_run = False
            i += 1
            continue
        fence, lang, rest = m.groups()
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            j += 1
        body = "\n".join(ln[len(lines[i]) - len(lines[i].lstrip()) :] for ln in lines[i + 1 : j]) + "\n"
        title = _TITLE.search(rest)
        if title:
            out.append(Block("file", body, i + 1, title.group(1)))
        elif lang == "bash" and marked:
            out.append(Block("run", body, i + 1))
        elif lang == "text" and after_run:
            out.append(Block("expect", body, i + 1))
        after_run = lang == "bash" and marked
        marked = False
        i = j + 1
    return out


def _tested_pages() -> list[Path]:
    return [p for p in PAGES if any(b.kind == "run" for b in blocks(p))]


def _norm(line: str) -> str:
    line = _NUMBER.sub("0", re.sub(r"-{3,}", "---", line.replace("~", "")))
    line = _UNIT.sub(lambda m: "J" if m.group(0).endswith("J") else "s", line)
    return " ".join(line.split())


def _pattern(expected: str) -> re.Pattern:
    parts = [re.escape(p) for p in _norm(expected).split("...")]
    return re.compile("^" + ".*".join(parts) + "$")


def missing_lines(expected: str, output: str) -> list[str]:
    """Expected lines not found, in order, in the output (empty: it matches)."""
    actual = [_norm(ln) for ln in output.splitlines()]
    pos, missing = 0, []
    for want in expected.splitlines():
        if not want.strip() or want.strip() == "...":
            continue
        pat = _pattern(want)
        for k in range(pos, len(actual)):
            if pat.match(actual[k]):
                pos = k + 1
                break
        else:
            missing.append(want)
    return missing


def workdir(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    for name in ("configs", "scripts"):
        shutil.copytree(REPO / name, tmp_path / name)
    venv = tmp_path / ".venv"
    venv.symlink_to(Path(sys.prefix))  # the test interpreter's own (virtual) environment
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    env["COLUMNS"] = "200"
    return tmp_path, env


@pytest.mark.docs
@pytest.mark.parametrize("page", _tested_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_the_page_runs_as_written(page, tmp_path):
    cwd, env = workdir(tmp_path)
    output = ""
    for b in blocks(page):
        where = f"{page.relative_to(REPO)}:{b.line}"
        if b.kind == "file":
            (cwd / b.name).parent.mkdir(parents=True, exist_ok=True)
            (cwd / b.name).write_text(b.text)
        elif b.kind == "run":
            r = subprocess.run(
                ["bash", "-e", "-c", b.text], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
            )
            output = r.stdout + r.stderr  # a sample shows what a terminal shows: both
            assert r.returncode == 0, f"{where} exited {r.returncode}:\n{output[-3000:]}"
        else:
            missing = missing_lines(b.text, output)
            assert not missing, f"{where}: sample output lines not in the real output: {missing}\n{output[-3000:]}"


def test_the_loose_comparison():
    out = "rec  batch\n  1   1024  ~24.7 J  reached\n  2  512  ~18.1 J  reached\nTotal: energy 367.1 J (estimated)\n"
    assert missing_lines("rec batch\n...\n  2   64  33 J  reached\nTotal: energy 1 J ...", out) == []
    assert missing_lines("Total: energy 1 J (estimated)\nrec batch", out) == ["rec batch"]  # in order
    assert missing_lines("  1  1024 ~1 J crashed", out) == ["  1  1024 ~1 J crashed"]


def test_blocks_are_found_by_the_convention(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(
        '```python title="a.py"\nprint(1)\n```\n\n<!-- docs-test -->\n```bash\npython a.py\n```\n\n```text\n1\n```\n'
        "```bash\nnot run\n```\n"
    )
    assert [(b.kind, b.text, b.name) for b in blocks(page)] == [
        ("file", "print(1)\n", "a.py"),
        ("run", "python a.py\n", ""),
        ("expect", "1\n", ""),
    ]
