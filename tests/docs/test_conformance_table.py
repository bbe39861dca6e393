"""docs/specs.md's conformance tables: one row per normative item, a test or a reason each.

The page holds one table per specification, under a heading that names the
document's number (``### UAMP 1.0 (000) — N rows: a tested, b deviation``).
Each row is ``| section | item | status | test or reason |``. A **tested**
row names test functions as ``tests/…/test_x.py::test_name``; a
**deviation** or **n/a** row says why in words (and may name tests that pin
what uamp does instead). The floors below only move up: a table that loses
rows has lost items, not gained precision.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "specs.md"
STATUSES = ("tested", "deviation", "n/a")
#: The least number of rows each document's table may have (raise them as rows are added).
FLOORS = {"000": 168, "001": 54, "002": 169, "003": 86, "004": 74}
TEST_REF = re.compile(r"(tests/[\w/]+\.py)(?:::(\w+))?")
HEADING = re.compile(r"^### .*\((\d{3})\)")
COUNTS = re.compile(r" — (\d+) rows: (.*)$")


def _tables() -> dict[str, tuple[str, list[list[str]]]]:
    """``{spec number: (heading, rows)}``; each row is its four cells."""
    text = PAGE.read_text(encoding="utf-8").split("## Conformance", 1)[1]
    tables: dict[str, tuple[str, list[list[str]]]] = {}
    current: list[list[str]] | None = None
    for line in text.splitlines():
        heading = HEADING.match(line)
        if heading:
            current = []
            tables[heading.group(1)] = (line, current)
        elif line.startswith("### ") or line.startswith("## "):
            current = None
        elif current is not None and line.startswith("| ") and line[2:5] not in ("§ |", "---"):
            current.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return tables


@cache
def _functions(path: str) -> frozenset[str]:
    """The names of the functions defined in a test module (at any depth)."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    return frozenset(
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    )


def test_the_page_has_a_table_for_each_of_the_five_documents() -> None:
    assert set(_tables()) == {"000", "001", "002", "003", "004"}
    assert set(FLOORS) == set(_tables())


@pytest.mark.parametrize("spec", sorted(FLOORS))
def test_each_table_keeps_its_floor_and_its_heading_counts_its_rows(spec: str) -> None:
    heading, rows = _tables()[spec]
    assert len(rows) >= FLOORS[spec], f"{spec}: {len(rows)} rows, floor {FLOORS[spec]}"
    counted = COUNTS.search(heading)
    assert counted is not None, heading
    statuses = Counter(cells[2] for cells in rows)
    said = ", ".join(f"{statuses[s]} {s}" for s in STATUSES if statuses[s])
    assert (int(counted.group(1)), counted.group(2)) == (len(rows), said), heading


@pytest.mark.parametrize("spec", sorted(FLOORS))
def test_every_row_has_an_allowed_status_and_its_evidence(spec: str) -> None:
    bad = []
    for cells in _tables()[spec][1]:
        if len(cells) != 4 or not all(cells) or cells[2] not in STATUSES:
            bad.append(cells)
            continue
        refs = TEST_REF.findall(cells[3])
        if any(not name for _, name in refs):
            bad.append(cells)  # a module is not a test: name the function
        elif cells[2] == "tested" and not refs:
            bad.append(cells)
        elif cells[2] != "tested" and len(TEST_REF.sub("", cells[3]).split()) < 4:
            bad.append(cells)  # a deviation or n/a says why, in words
    assert bad == []


def test_every_named_test_exists() -> None:
    missing = []
    for path, name in TEST_REF.findall(PAGE.read_text(encoding="utf-8")):
        if not (ROOT / path).exists():
            missing.append(path)
        elif name and name not in _functions(path):
            missing.append(f"{path}::{name}")
    assert missing == []


def test_the_checks_catch_a_missing_function_and_a_module_reference() -> None:
    assert "test_every_named_test_exists" in _functions("tests/docs/test_conformance_table.py")
    assert "test_no_such_thing" not in _functions("tests/docs/test_conformance_table.py")
    assert TEST_REF.findall("`tests/agents/test_level1_core.py`") == [
        ("tests/agents/test_level1_core.py", "")
    ]
