"""docs/specs.md's conformance table names tests that exist, and every row has a status."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "specs.md"
STATUSES = {"tested", "deviation", "n/a", "untested", "not done"}


def _rows() -> list[list[str]]:
    text = PAGE.read_text(encoding="utf-8").split("## Conformance", 1)[1]
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| § ") and not line.startswith("| ---"):
            rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def test_every_row_has_a_status_and_evidence() -> None:
    rows = _rows()
    assert len(rows) > 150
    for cells in rows:
        assert len(cells) == 4, cells
        assert cells[2] in STATUSES, cells
        assert cells[3], cells


def test_every_named_test_exists() -> None:
    missing = []
    for path, name in re.findall(r"(tests/[\w/]+\.py)(?:::(\w+))?", PAGE.read_text()):
        source = ROOT / path
        if not source.exists():
            missing.append(path)
        elif name and not re.search(rf"^(async )?def {name}\b", source.read_text(), re.M):
            missing.append(f"{path}::{name}")
    assert missing == []
