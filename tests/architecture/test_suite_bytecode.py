"""The checkout's code compiled once for the suite's subprocesses (tests/_support/bytecode.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests._support.bytecode import compile_checkout, sources


def _tree(root: Path) -> Path:
    """A checkout-like tree: a package, tests, bench and a folder that is not code."""
    for name in ("pkg", "tests"):
        (root / name).mkdir()
        (root / name / "__init__.py").write_text("")
        (root / name / "mod.py").write_text("X = 1\n")
    (root / "bench").mkdir()
    (root / "bench" / "run.py").write_text("Y = 2\n")
    (root / "docs").mkdir()
    (root / "docs" / "snippet.py").write_text("Z = 3\n")
    return root


def test_the_sources_are_the_packages_and_bench(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    assert sources(root) == [root / "pkg", root / "tests", root / "bench"]


@pytest.mark.parametrize("dont_write", [True, False])
def test_compiled_only_when_imports_do_not_write(
    dont_write: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path)
    monkeypatch.setattr(sys, "dont_write_bytecode", dont_write)
    compile_checkout(root)
    cached = [
        Path(importlib.util.cache_from_source(str(root / rel))).is_file()
        for rel in ("pkg/mod.py", "tests/mod.py", "bench/run.py", "docs/snippet.py")
    ]
    assert cached == ([True, True, True, False] if dont_write else [False] * 4)
