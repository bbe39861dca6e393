"""uamp_proto stays sans-IO: no event loop, socket, thread or clock imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "uamp_proto"
FORBIDDEN_MODULES = {
    "trio",
    "asyncio",
    "anyio",
    "socket",
    "ssl",
    "selectors",
    "threading",
    "time",
    "random",
    "secrets",
    "datetime",
}
FORBIDDEN_CALLS = {"time.time", "time.monotonic", "datetime.now", "os.urandom"}
#: Randomness allowed only where it is the injectable default: ids.random_ids,
#: the default of ConnectionConfig.ids (a caller passes counter_ids or its own).
ONLY_IN = {"uuid": {"ids.py"}, "os.urandom": {"ids.py"}}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_imports_nothing_that_does_io_or_reads_the_clock(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    bad: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            names = []
        bad.extend(n for n in names if n.split(".")[0] in FORBIDDEN_MODULES)
        bad.extend(n for n in names if path.name not in ONLY_IN.get(n.split(".")[0], {path.name}))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            dotted = f"{node.value.id}.{node.attr}"
            if dotted in FORBIDDEN_CALLS and path.name not in ONLY_IN.get(dotted, set()):
                bad.append(dotted)
    assert not bad, f"{path.name} uses {bad}"


def test_the_check_itself_catches_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "bad.py"
    sample.write_text("import trio\nfrom time import monotonic\n")
    tree = ast.parse(sample.read_text())
    found = [
        n.names[0].name if isinstance(n, ast.Import) else n.module
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
    ]
    assert {m.split(".")[0] for m in found if m} <= FORBIDDEN_MODULES


def test_package_imports_without_loading_an_event_loop() -> None:
    import subprocess
    import sys

    code = (
        "import sys, uamp_proto, uamp_proto.connection, uamp_proto.sse, uamp_proto.flow;"
        "import uamp_proto.payment, uamp_proto.response, uamp_proto.responder;"
        "bad = {'trio', 'asyncio', 'anyio'} & set(sys.modules);"
        "print(sorted(bad)); raise SystemExit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


#: ``uamp_proto.ids``' random sources: the rest of the package only names them
#: as a default a caller can replace (``ids: IdSource = random_ids``).
RANDOM_SOURCES = {"random_ids", "random_hex", "random_uuid4", "short_random_ids"}


def _called_names(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in RANDOM_SOURCES:
                names.append(name)
    return names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_randomness_is_only_an_injectable_default(path: Path) -> None:
    if path.name == "ids.py":
        return
    called = _called_names(ast.parse(path.read_text(), filename=str(path)))
    assert not called, f"{path.name} calls {called}: take an IdSource whose default it is"


def test_the_randomness_check_catches_a_direct_call() -> None:
    tree = ast.parse("from .ids import random_ids\nx = random_ids('evt')\ny = ids.random_hex()\n")
    assert _called_names(tree) == ["random_ids", "random_hex"]
    assert _called_names(ast.parse("def f(ids=random_ids):\n    return ids('evt')\n")) == []
