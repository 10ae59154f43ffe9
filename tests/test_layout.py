"""The package's shape, as issue 26 set it: few modules at the root, none over 500 lines, and no import circle
through the core (spec, optimizer, records, objective, accounting), type-only and function-level imports
included."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "zeus_run"
CORE = {"spec", "optimizer", "records", "objective", "accounting"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every zeus_run module ``path`` imports, anywhere in it (under TYPE_CHECKING and in functions too)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
    return {m for m in out if m == "zeus_run" or m.startswith("zeus_run.")}


def component(module: str) -> str:
    """The room a module lives in: ``zeus_run.engine.core`` -> ``engine``; ``zeus_run.records`` -> ``records``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "zeus_run"


def component_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        src = component(module_name(path))
        for target in imports_of(path):
            dst = component(target)
            if dst != src and dst != "zeus_run":
                graph.setdefault(src, set()).add(dst)
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(graph.get(n, ()))
    return seen


def test_no_import_circle_passes_through_the_core():
    graph = component_graph()
    assert set(graph) | {d for ds in graph.values() for d in ds} >= CORE, "a core room was renamed: update CORE"
    circles = sorted(room for room in CORE if room in reachable(graph, room))
    assert circles == [], f"import circles through {circles}: { ({r: sorted(graph.get(r, ())) for r in circles}) }"


def test_the_graph_sees_a_circle_when_there_is_one(tmp_path):
    graph = {"records": {"optimizer"}, "optimizer": {"objective"}, "objective": {"records"}}
    assert "records" in reachable(graph, "records")  # the check above can fail


def test_at_most_15_modules_at_the_root_and_none_over_500_lines():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 15, root
    long = {
        str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 500
    }
    assert long == {}
