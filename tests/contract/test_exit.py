"""`ExitWatch`: how a script that reports its own end is ending, read at its exit (a real process each)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

PRELUDE = """
import atexit, json, sys, threading
sys.path.insert(0, {repo!r})
from zeus_run.contract import exit_watch
w = exit_watch()
w.install()
atexit.register(lambda: open({out!r}, "w").write(json.dumps({{"code": w.code(), "output": w.output(),
                                                            "failure": w.failure(200)}})))
"""


def _end(tmp_path, body: str) -> tuple[int, dict]:
    out = tmp_path / "end.json"
    script = tmp_path / "s.py"
    script.write_text(PRELUDE.format(repo=str(REPO), out=str(out)) + textwrap.dedent(body))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    return r.returncode, json.loads(out.read_text())


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("print('fine')\n", 0),
        ("print('RuntimeError: CUDA out of memory')\nsys.exit(1)\n", 1),
        ("sys.exit(3)\n", 3),
        ("sys.exit('a message')\n", 1),
        ("raise ValueError('loss is nan')\n", 1),
        ("raise KeyboardInterrupt\n", 130),
        ("t = threading.Thread(target=sys.exit, args=(5,)); t.start(); t.join()\n", 0),  # a thread's exit is its own
    ],
)
def test_the_exit_code_is_the_one_the_process_ends_with(tmp_path, body, code):
    rc, end = _end(tmp_path, body)
    assert end["code"] == code
    assert rc == code or (code == 130 and rc == -2)  # SIGINT's own way out


def test_the_last_output_is_kept_and_passed_on(tmp_path):
    rc, end = _end(
        tmp_path, "for i in range(100): print(f'line {i}')\nprint('RuntimeError: CUDA out of memory')\nsys.exit(1)\n"
    )
    assert rc == 1 and end["output"].splitlines()[-1] == "RuntimeError: CUDA out of memory"
    assert len(end["output"].splitlines()) == 40  # the last lines only
    assert end["failure"].startswith("exit code 1; last output:\n") and len(end["failure"]) <= 200
    assert end["failure"].endswith("RuntimeError: CUDA out of memory")


def test_an_uncaught_exception_is_in_the_failure_even_where_nothing_printed_it(tmp_path):
    _, end = _end(tmp_path, "sys.stderr = open('/dev/null', 'w')\nraise ValueError('loss is nan')\n")
    assert end["code"] == 1 and "ValueError: loss is nan" in end["failure"]
