"""The package's shape: one ``fxfuzz`` namespace, layers that import one way, no circles.

Read from the source with ``ast`` (nothing is imported), so a new upward import or circle
fails here whether it sits at module level or inside a function.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import fxfuzz
import fxfuzz.oracles
import fxfuzz.strategies
import pytest

# Layer of each sub-package: a module may import its own sub-package and lower layers only.
# strategies and oracles stand side by side (same layer, neither imports the other), and so
# do report and repro, with the one direction report -> repro (the report links repros).
LAYERS = {
    "core": 0,
    "strategies": 1,
    "oracles": 1,
    "campaign": 2,
    "repro": 3,
    "report": 3,
    "tools": 4,
    "cli": 5,
    "pytest_plugin": 5,
    "__main__": 6,
}
SIDEWAYS = {("report", "repro")}


def _modules() -> dict[str, Path]:
    roots = {
        "fxfuzz": Path(fxfuzz.__file__).parent,
        "fxfuzz.strategies": Path(fxfuzz.strategies.__file__).parent,
        "fxfuzz.oracles": Path(fxfuzz.oracles.__file__).parent,
    }
    found = {}
    for prefix, root in roots.items():
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            found[".".join([prefix, *parts])] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """fxfuzz modules ``name`` imports, anywhere in the file, resolved to modules we have."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                mod = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                out.add(sub if sub in MODULES else mod)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # None: the root package (lazy exports)


def test_the_whole_package_is_found():
    assert {
        "fxfuzz.core.case",
        "fxfuzz.campaign.engine",
        "fxfuzz.cli.main",
        "fxfuzz.strategies.graphs",
        "fxfuzz.oracles.semantics",
    } <= MODULES.keys()
    assert all(_layer(m) in LAYERS for m in MODULES if _layer(m) is not None)


def test_layers_import_one_way():
    wrong = []
    for name, imported in GRAPH.items():
        here = _layer(name)
        for other in imported:
            there = _layer(other)
            if here is None or there is None or here == there or (here, there) in SIDEWAYS:
                continue
            if LAYERS[there] >= LAYERS[here]:
                wrong.append(f"{name} -> {other}")
    assert not wrong, wrong


def test_no_import_circles():
    # Tarjan's strongly connected components over every fxfuzz import.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not circles, circles


@pytest.mark.processes
def test_the_issue_names_import_and_help_imports_no_torch():
    code = (
        "import sys, fxfuzz, fxfuzz.cli, fxfuzz.pytest_plugin; fxfuzz.cli.build_parser(); "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "from fxfuzz.strategies import graph_cases; from fxfuzz.oracles import verify"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.processes
@pytest.mark.parametrize("old", ["fuzz", "strategies", "oracles"])
def test_no_bare_top_level_packages(old, tmp_path):
    """From a directory without the checkout, the old top-level names are gone."""
    proc = subprocess.run(
        [sys.executable, "-c", f"import {old}"], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr


# Names that once meant several things at once (a row of the check table and three other
# types; a pass's source module and a worker message; a contract and a torch function; two
# pass loaders...): each is defined at the top level of one module only.
ONE_MEANING = ("Check", "Source", "Blame", "SET_GRAD", "STAGES", "load_pass", "judge", "Judged", "judged")


def _top_level_names(source: str) -> set[str]:
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def defined_twice(sources: dict[str, str], names: tuple[str, ...]) -> dict[str, list[str]]:
    """Each of ``names`` that two or more of ``sources`` (module -> source) define, with them
    (an import is no definition: using a name elsewhere is what it is for)."""
    where: dict[str, list[str]] = {}
    for module, source in sorted(sources.items()):
        for name in _top_level_names(source) & set(names):
            where.setdefault(name, []).append(module)
    return {name: modules for name, modules in where.items() if len(modules) > 1}


def test_each_name_means_one_thing():
    assert defined_twice({m: p.read_text() for m, p in MODULES.items()}, ONE_MEANING) == {}


def test_a_name_defined_in_two_modules_is_caught():
    sources = {
        "a": "def load_pass(spec): ...\nclass Check: ...\n",
        "b": "load_pass = None\nCheck: type = int\nSource = 1\n",
        "c": "from a import Check, load_pass\n",
    }
    assert defined_twice(sources, ONE_MEANING) == {"Check": ["a", "b"], "load_pass": ["a", "b"]}


def _oracles_named(source: str) -> set[str]:
    """The oracle names written as literals in the ``Finding(...)`` calls of ``source``."""
    named = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Finding":
            first = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "oracle"), None)
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                named.add(first.value)
    return named


def test_a_module_named_for_an_oracle_finds_for_that_oracle_only():
    from fxfuzz.oracles.finding import ORACLES

    named_for = {m: m.rsplit(".", 1)[1] for m in MODULES if m.startswith("fxfuzz.oracles.")}
    wrong = {
        m: sorted(_oracles_named(MODULES[m].read_text()) - {oracle})
        for m, oracle in named_for.items()
        if oracle in ORACLES and _oracles_named(MODULES[m].read_text()) - {oracle}
    }
    assert {"fxfuzz.oracles.downstream", "fxfuzz.oracles.structure"} <= named_for.keys()
    assert wrong == {}


def test_a_finding_of_another_oracle_is_seen():
    source = 'Finding("structure", "cleanup_failed", "m")\nFinding(oracle="effects", kind="k", message="m")\n'
    assert _oracles_named(source) == {"structure", "effects"}
    assert _oracles_named("Finding(f.oracle, 'k', 'm')\n") == set()


def _test_module_imports(tests: Path) -> list[str]:
    """``module -> imported`` for each import of a test module (``test_*``) in a test module
    under ``tests``: what two test modules share belongs in tests/helpers (tests/README.md)."""
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.relative_to(tests)} -> {n}" for n in names if n.split(".")[-1].startswith("test_")]
    return found


def test_no_test_module_imports_another(tmp_path):
    assert _test_module_imports(Path(__file__).parents[1]) == []
    (tmp_path / "test_a.py").write_text("from test_b import shared\n")
    assert _test_module_imports(tmp_path) == ["test_a.py -> test_b"]
