"""The three packages import in one direction and have no import cycles.

The graph is built from the source with ``ast``, so it sees every import a
module can run: module-level and function-level alike (an import moved into a
function to dodge a cycle is still an edge). Only imports under
``if TYPE_CHECKING:`` are left out, since they never run.

Importing ``a.b.c`` also runs ``a/__init__.py`` and ``a/b/__init__.py``; those
package edges count too, except from a module inside that package (Python has
already started the package's ``__init__`` before its submodules load).

Layers (see docs/architecture.md): ``uamp_proto`` imports only itself;
``uamp_agents`` imports itself and ``uamp_proto``; ``uamp_trio`` imports itself,
``uamp_proto`` and ``uamp_stores`` -- except ``uamp_trio.cli.agents``, which wires agents
into servers, and ``uamp_trio.bench.drivers``, whose HTTP/1.1 client is the providers';
``uamp_asgi`` imports itself, ``uamp_proto`` and ``uamp_stores``; ``uamp_stores`` (the
stores both servers share, on anyio) imports itself and ``uamp_proto``, and both
``uamp_trio`` and ``uamp_asgi`` may import it.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("uamp_proto", "uamp_trio", "uamp_agents", "uamp_asgi", "uamp_stores")

ALLOWED: Mapping[str, frozenset[str]] = {
    "uamp_proto": frozenset({"uamp_proto"}),
    "uamp_agents": frozenset({"uamp_agents", "uamp_proto"}),
    "uamp_trio": frozenset({"uamp_trio", "uamp_proto", "uamp_stores"}),
    # The ASGI binding: the sans-IO core and its own I/O, never the Trio binding.
    "uamp_asgi": frozenset({"uamp_asgi", "uamp_proto", "uamp_stores"}),
    # The stores both bindings share (anyio, worker threads): below both, above the core.
    "uamp_stores": frozenset({"uamp_stores", "uamp_proto"}),
}
# Modules allowed to reach across the layer rule, and why.
BRIDGES: Mapping[str, frozenset[str]] = {
    # The command line wires the agent runtime into the servers.
    "uamp_trio.cli.agents": frozenset({"uamp_agents"}),
    # The load generator's HTTP/1.1 requests go over the lean client the model
    # providers use (uamp_agents.http1_client and its pool): one such client, not two.
    "uamp_trio.bench.drivers": frozenset({"uamp_agents"}),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    if isinstance(test, ast.Attribute):
        return test.attr == "TYPE_CHECKING"
    return False


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module name ``module`` may import at run time."""
    found: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                if node.level > 1:
                    base_parts = base_parts[: -(node.level - 1)]
                base = ".".join(base_parts)
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.add(target)
            # ``from pkg import sub`` imports the submodule when there is one.
            found.update(f"{target}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def build_graph(files: Mapping[str, str], package_names: Iterable[str]) -> dict[str, set[str]]:
    """Import graph over ``files`` (module name -> source); only known modules are nodes."""
    roots = tuple(package_names)
    packages = {name for name in files if any(other.startswith(name + ".") for other in files)}
    graph: dict[str, set[str]] = {}
    for module, source in files.items():
        raw = _imports(ast.parse(source), module, module in packages)
        edges: set[str] = set()
        for target in raw:
            if target.split(".")[0] not in roots:
                continue
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if prefix not in files or prefix == module:
                    continue
                # A parent package's __init__ has already started for its own submodules.
                if module.startswith(prefix + "."):
                    continue
                edges.add(prefix)
        graph[module] = edges
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def connect(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def layer_violations(graph: Mapping[str, set[str]]) -> list[str]:
    """Edges that point from a package into one its layer may not import."""
    bad: list[str] = []
    for module, targets in sorted(graph.items()):
        top = module.split(".")[0]
        allowed = ALLOWED[top] | BRIDGES.get(module, frozenset())
        for target in sorted(targets):
            if target.split(".")[0] not in allowed:
                bad.append(f"{module} -> {target}")
    return bad


@functools.cache
def _tree() -> dict[str, set[str]]:
    """The packages' import graph, parsed once per test process (six tests read it; none
    changes it)."""
    files = {
        _module_name(path): path.read_text(encoding="utf-8")
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
    }
    return build_graph(files, PACKAGES)


# --- the checker checks itself ------------------------------------------------

SELF_CASES = [
    ("plain cycle", {"p.a": "import p.b", "p.b": "from p import a"}, [["p.a", "p.b"]]),
    (
        "function-body import counts",
        {"p.a": "def f():\n    import p.b", "p.b": "import p.a"},
        [["p.a", "p.b"]],
    ),
    (
        "TYPE_CHECKING does not count",
        {
            "p.a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import p.b",
            "p.b": "import p.a",
        },
        [],
    ),
    (
        "else branch of TYPE_CHECKING counts",
        {"p.a": "if TYPE_CHECKING:\n    pass\nelse:\n    import p.b", "p.b": "import p.a"},
        [["p.a", "p.b"]],
    ),
    ("relative import", {"p.a": "from . import b", "p.b": "from .a import x"}, [["p.a", "p.b"]]),
    (
        "package __init__ re-exporting its submodule is no cycle",
        {"p": "from p.a import x", "p.a": "x = 1"},
        [],
    ),
    (
        "a submodule importing a sibling through the package __init__",
        {"p": "from p.s.a import x", "p.s": "", "p.s.a": "import p.t", "p.t": "from p.s import a"},
        [["p.s.a", "p.t"]],
    ),
    (
        "three-module ring",
        {"p.a": "import p.b", "p.b": "import p.c", "p.c": "import p.a"},
        [["p.a", "p.b", "p.c"]],
    ),
    ("no cycle", {"p.a": "import p.b", "p.b": "import os"}, []),
]


@pytest.mark.parametrize(
    ("files", "expected"), [case[1:] for case in SELF_CASES], ids=[c[0] for c in SELF_CASES]
)
def test_the_checker_finds_cycles(files: dict[str, str], expected: list[list[str]]) -> None:
    assert cycles(build_graph(files, ["p"])) == expected


def test_the_checker_reports_a_layer_violation() -> None:
    graph = build_graph({"uamp_proto.a": "import uamp_trio.b", "uamp_trio.b": "x = 1"}, PACKAGES)
    assert layer_violations(graph) == ["uamp_proto.a -> uamp_trio.b"]


# --- the tree -----------------------------------------------------------------


def test_the_graph_covers_every_package() -> None:
    graph = _tree()
    assert {module.split(".")[0] for module in graph} == set(PACKAGES)
    assert any(graph.values())


def test_no_import_cycles() -> None:
    found = cycles(_tree())
    assert found == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_imports_point_down_the_layers() -> None:
    assert layer_violations(_tree()) == []
