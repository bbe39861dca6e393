"""The server's wings: transports are plain modules the root mounts.

Only the composition root (``uamp_trio.app``) and the command line import a
transport; a transport (a module, or a package of modules) imports no other
transport; and no transport creates
shared state -- the root creates the stores and hands them over (see
docs/architecture.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.architecture.test_import_graph import _tree

ROOT = Path(__file__).resolve().parents[2]
TRANSPORTS = "uamp_trio.transports"
#: Who may import a transport (``asgi_options`` builds the A2A webhook client
#: ``uamp serve`` mounts, for the ASGI app, as the command line does).
MOUNTERS = {"uamp_trio.app", "uamp_trio.cli.parts", "uamp_trio.cli.stdio", "uamp_trio.asgi_options"}
#: The shared state the root creates (:class:`uamp_trio.stores.Stores`).
STORE_TYPES = {
    "Stores",
    "TaskStore",
    "MemoryTaskStore",
    "RedisTaskStore",
    "AcpSessionStore",
    "McpSessionStore",
    "SessionTracker",
}
#: A function that is a root of its own: ``uamp acp`` serves one peer on stdio.
OWN_ROOTS = {
    ("uamp_trio/transports/acp.py", "serve_stdio"),
    ("uamp_trio/transports/mcp.py", "serve_stdio"),
}


def _transport_of(module: str) -> str:
    """The transport a module belongs to (a transport is a module or a package of them)."""
    return module.removeprefix(TRANSPORTS + ".").split(".", 1)[0]


def test_only_the_root_imports_transports_and_transports_import_no_other() -> None:
    bad = []
    for module, targets in sorted(_tree().items()):
        for target in sorted(t for t in targets if t.startswith(TRANSPORTS + ".")):
            if module.startswith(TRANSPORTS + "."):
                if _transport_of(module) != _transport_of(target):
                    bad.append(f"{module} -> {target}")  # a transport knows no other
            elif module not in MOUNTERS and not module.startswith(TRANSPORTS):
                bad.append(f"{module} -> {target}")
    assert bad == []


def _store_constructions(source: str, rel: str) -> list[str]:
    """``file:line function: Type`` for every call of a store type in ``source``."""
    found: list[str] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if isinstance(node.func, ast.Attribute):
                name = node.func.attr
            if name in STORE_TYPES and (rel, function) not in OWN_ROOTS:
                found.append(f"{rel}:{node.lineno} {function}: {name}")
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), "<module>")
    return found


def test_no_transport_creates_shared_state() -> None:
    made = [
        hit
        for path in sorted((ROOT / "uamp_trio" / "transports").rglob("*.py"))
        for hit in _store_constructions(
            path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix()
        )
    ]
    assert made == []


def test_the_check_sees_a_store_built_inside_a_transport() -> None:
    planted = "def mount(app):\n    return stores.TaskStore(10)\n"
    assert _store_constructions(planted, "uamp_trio/transports/x.py") == [
        "uamp_trio/transports/x.py:2 mount: TaskStore"
    ]
    stdio = "def serve_stdio(store=None):\n    return store or AcpSessionStore()\n"
    assert _store_constructions(stdio, "uamp_trio/transports/acp.py") == []
    assert _store_constructions(stdio, "uamp_trio/transports/x.py") == [
        "uamp_trio/transports/x.py:2 serve_stdio: AcpSessionStore"
    ]


#: What the gRPC layer may import inside uamp_trio: it sits between the
#: transports (which use it) and the hosting and engine wings (which it uses).
GRPC_MAY_IMPORT = ("uamp_trio.grpc", "uamp_trio.hosting", "uamp_trio.engines")


def test_the_grpc_layer_sits_between_transports_and_hosting() -> None:
    bad = [
        f"{module} -> {target}"
        for module, targets in sorted(_tree().items())
        if module.startswith("uamp_trio.grpc")
        for target in sorted(targets)
        if target.startswith("uamp_trio") and not target.startswith(GRPC_MAY_IMPORT)
    ]
    assert bad == []
    below = [
        f"{module} -> {target}"
        for module, targets in sorted(_tree().items())
        if module.startswith(("uamp_trio.hosting", "uamp_trio.engines"))
        for target in targets
        if target.startswith("uamp_trio.grpc")
    ]
    assert below == []
