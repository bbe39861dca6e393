"""uamp_asgi runs on any ASGI server's loop: it never imports Trio (nor the Trio binding)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "uamp_asgi"
#: Trio, and what only runs on it.
FORBIDDEN = {"trio", "trio_websocket", "uamp_trio", "uamp_agents", "h11", "h2", "wsproto"}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def forbidden_imports(source: str) -> list[str]:
    """The modules of :data:`FORBIDDEN` that ``source`` imports, anywhere in it."""
    bad: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        bad.extend(n for n in names if n.split(".")[0] in FORBIDDEN)
    return bad


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_imports_no_trio(path: Path) -> None:
    assert forbidden_imports(path.read_text()) == []


def test_the_check_catches_a_trio_import() -> None:
    assert forbidden_imports("def f():\n    import trio.lowlevel\n") == ["trio.lowlevel"]
    assert forbidden_imports("from uamp_trio.engines import http\n") == ["uamp_trio.engines"]


def test_importing_the_app_and_its_transports_loads_no_trio() -> None:
    code = (
        "import sys, uamp_asgi, uamp_asgi.responders;"
        "from uamp_asgi.responders import function_agent;"
        "async def a(turn):\n    yield 'x'\n"
        "uamp_asgi.app([function_agent(a)]);"
        "bad = {'trio', 'uamp_trio', 'uamp_agents'} & set(sys.modules);"
        "print(sorted(bad)); raise SystemExit(1 if bad else 0)"
    )
    code = code.replace(";async", "\nasync").replace("'x'\nuamp", "'x'\nuamp")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
