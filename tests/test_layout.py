"""The package's shape, as issues 26, 39 and 48 set it: few modules at the root, none over 1,000 lines (500: a
warning), no import circle through the core (spec, optimizer, records, objective, accounting) nor between the live
optimizer's modules, no package loop (no two packages, nor a longer circle of them, importing each other), no
package importing another package's private module, a run directory that imports no policy, one live revision of
the default policy, and a test folder for every package. Type-only and function-level (lazy) imports count, except
that a private module may be named for types only (under ``TYPE_CHECKING``)."""

from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "zeus_run"
CORE = {"spec", "optimizer", "records", "objective", "accounting"}

#: Pairs of rooms that import each other, each with why it is allowed. Nothing else may.
MUTUAL = {
    # train.py's second half, split off by the 500-line rule (now a warning): it names `Trial` for types only (TYPE_CHECKING).
    ("_process_trials", "train"): "a module and its own helper: the helper imports it for types only",
}

#: What the run directory (storage) must never import: the optimizer, the cost, the engine (its replay and
#: knobs included) and the doors above it. Its callers pass in what a rule needs (`zeus_run.door.opening`).
RUNDIR_NEVER = (
    "zeus_run.optimizer",
    "zeus_run.cost",
    "zeus_run.engine",
    "zeus_run.door",
    "zeus_run.launcher",
    "zeus_run.asktell",
)

TESTS = Path(__file__).resolve().parent


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


def _type_checking(node: ast.AST) -> bool:
    """Whether ``node`` is ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``)."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(path: Path) -> set[str]:
    """Every zeus_run module ``path`` imports when it runs, in functions too (not under ``TYPE_CHECKING``); a
    ``from zeus_run.pkg import _mod`` names the module ``zeus_run.pkg._mod`` when that is a module."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    todo: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"))]
    while todo:
        node = todo.pop()
        if _type_checking(node):
            assert isinstance(node, ast.If)
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            for a in node.names:
                sub = PACKAGE.parent.joinpath(*base.split("."), a.name)
                if sub.with_suffix(".py").is_file() or (sub / "__init__.py").is_file():
                    out.add(f"{base}.{a.name}")
        todo.extend(ast.iter_child_nodes(node))
    return {m for m in out if m == "zeus_run" or m.startswith("zeus_run.")}


def private_reaches(imports: dict[str, set[str]]) -> list[str]:
    """``importer -> module`` for every import of another package's private module (``zeus_run.pkg._mod``: a
    module whose name starts with ``_`` inside a package; the root's own ``_fs``, ``_units`` ... are everyone's)."""
    out = []
    for importer, targets in imports.items():
        for target in targets:
            parts = target.split(".")
            private = any(p.startswith("_") and not p.startswith("__") for p in parts[2:])
            if private and len(parts) > 2 and component(target) != component(importer):
                out.append(f"{importer} -> {target}")
    return sorted(out)


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


#: A module over this many lines is worth a look for a seam (a warning, not a failure: a rule that cuts an
#: algorithm wherever it reaches a count splits it across files that import each other).
SOFT_LINES = 500
#: No module over this many lines.
MAX_LINES = 1000


def module_lengths() -> dict[str, int]:
    return {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}


def test_at_most_15_modules_at_the_root_and_none_over_1000_lines():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 15, root
    lengths = module_lengths()
    assert {m: n for m, n in lengths.items() if n > MAX_LINES} == {}
    long = {m: n for m, n in lengths.items() if n > SOFT_LINES}
    if long:
        warnings.warn(f"modules over {SOFT_LINES} lines (split them at a seam, if they have one): {long}", stacklevel=1)


def mutual_pairs(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Every pair of rooms that import each other, each pair sorted."""
    return {(a, b) for a, targets in graph.items() for b in targets if a < b and a in graph.get(b, ())}


def test_no_two_packages_import_each_other():
    pairs = mutual_pairs(component_graph())
    unexplained = sorted(pairs - set(MUTUAL))
    assert unexplained == [], f"packages that import each other: {unexplained}; break the circle (or say why in MUTUAL)"
    gone = sorted(set(MUTUAL) - pairs)
    assert gone == [], f"{gone} no longer import each other: take them out of MUTUAL"


def package_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The loops of the package graph: each set of packages that reach one another (Tarjan's strongly connected
    components of more than one package), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            loop = []
            while True:
                w = stack.pop()
                on.discard(w)
                loop.append(w)
                if w == v:
                    break
            if len(loop) > 1:
                out.append(sorted(loop))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_package_loop():
    loops = [loop for loop in package_loops(component_graph()) if tuple(loop) not in MUTUAL]
    assert loops == [], f"packages that import each other round a loop (lazy imports count): {loops}"


def test_the_loop_check_sees_a_loop_through_a_lazy_import():
    # engine/save.py -> export -> views -> engine, the loop issue 48 found: three packages, no pair among them
    graph = {"engine": {"export"}, "export": {"views"}, "views": {"engine", "records"}, "records": set()}
    assert mutual_pairs(graph) == set() and package_loops(graph) == [["engine", "export", "views"]]
    # a lazy import counts: engine/knobs.py imports the power package only inside a function
    path = PACKAGE / "engine" / "knobs.py"
    top = {n.module for n in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(n, ast.ImportFrom)}
    assert "zeus_run.power" not in top and "zeus_run.power" in imports_of(path)


def test_no_package_imports_another_packages_private_module():
    imports = {module_name(p): runtime_imports(p) for p in PACKAGE.rglob("*.py")}
    found = private_reaches(imports)
    assert found == [], (
        f"imports of another package's private module: {found}; import it from that package (export it in its "
        "__init__), or name it under TYPE_CHECKING if it is for types only (docs/layout.md)"
    )


def test_the_private_check_sees_a_private_reach_and_spares_types():
    imports = {"zeus_run.launcher.run": {"zeus_run.asktell._session", "zeus_run.asktell", "zeus_run._fs"}}
    assert private_reaches(imports) == ["zeus_run.launcher.run -> zeus_run.asktell._session"]
    assert private_reaches({"zeus_run.asktell._ask": {"zeus_run.asktell._keys"}}) == []  # its own package's


def test_an_import_for_types_only_is_not_a_runtime_import():
    path = PACKAGE / "_process_trials.py"  # names zeus_run.energy._self for types only
    source = path.read_text(encoding="utf-8")
    assert "zeus_run.energy._self" in source and "zeus_run.energy._self" not in runtime_imports(path)
    assert "zeus_run.contract" in runtime_imports(path)


def test_the_pair_check_sees_a_pair():
    graph = {"engine": {"rundir"}, "rundir": {"engine", "spec"}, "spec": set()}
    assert mutual_pairs(graph) == {("engine", "rundir")}  # the check above can fail


def test_the_run_directory_imports_no_policy():
    found = {
        f"{module_name(path)} -> {target}"
        for path in (PACKAGE / "rundir").rglob("*.py")
        for target in imports_of(path)
        if target.startswith(RUNDIR_NEVER)
    }
    assert found == set(), sorted(found)


def test_the_launcher_is_imported_by_no_package_below_it():
    below = {
        "engine",
        "door",
        "rundir",
        "asktell",
        "executors",
        "trial",
        "server",
        "views",
        "optimizer",
        "sim",
        "export",
    }
    graph = component_graph()
    assert sorted(room for room in below if "launcher" in graph.get(room, ())) == []


def test_every_package_has_a_test_folder():
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    missing = [name for name in packages if not any((TESTS / name).glob("test_*.py"))]
    assert missing == [], f"packages without tests/<package>/test_*.py: {missing}"


def module_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (``zeus_run.optimizer`` -> ``zeus_run.optimizer.voi.walk``...)."""
    root = PACKAGE.parent / package.replace(".", "/")
    graph = {}
    for path in root.rglob("*.py"):
        graph[module_name(path)] = {m for m in imports_of(path) if m.startswith(package + ".") or m == package}
    return graph


def circles(graph: dict[str, set[str]]) -> list[str]:
    return sorted(m for m in graph if m in reachable(graph, m))


def test_the_live_optimizer_modules_import_no_circle():
    """The live policy imports its stages, its stages its state; the frozen revisions (legacy) are left as they were."""
    graph = {
        m: {t for t in targets if ".legacy" not in t and t != "zeus_run.optimizer"}
        for m, targets in module_graph("zeus_run.optimizer").items()
        if ".legacy" not in m and m != "zeus_run.optimizer"
    }
    assert "zeus_run.optimizer.voi.policy" in graph, "the live policy moved: update this test"
    assert circles(graph) == []


def test_the_circle_check_sees_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == ["a", "b", "c"]  # the check above can fail


def test_the_live_policy_branches_on_no_revision():
    """Earlier revisions live in `zeus_run.optimizer.legacy`, never as branches of the live code."""
    branches = {
        str(p.relative_to(PACKAGE)): n
        for p in (PACKAGE / "optimizer" / "voi").rglob("*.py")
        if (n := len(re.findall(r"revision\s*(?:[<>]=?|==|!=)", p.read_text())))
    }
    assert branches == {}
