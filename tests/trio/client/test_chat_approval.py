"""``uamp chat`` on a pseudo-terminal asks the person to approve a tool call (issue 30)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._support.cli import UAMP_SCRIPT, Served
from tests.trio.client.test_chat_interactive import Terminal


@pytest.fixture(scope="module")
def approving() -> Iterator[str]:
    command = [UAMP_SCRIPT, "serve", "--port", "0", "--no-access-log", "--approve", "add"]
    with Served(command) as srv:
        yield srv.url()


# (typed answer, what the answer says, the outcome shown)
CASES = {
    "approve": ("y", "2 + 3 = 5", "approved"),
    "deny": ("n not now", "denied by the user", "denied"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_chat_shows_the_approval_and_the_typed_line_answers_it(
    approving: str, tmp_path: Path, case: str
) -> None:
    typed, answer, outcome = CASES[case]
    term = Terminal(approving, tmp_path / "history")
    term.prompt_after(0)
    term.type("what is 2+3?\r")
    term.read_until(r"approve\?")
    assert 'add({"a":2,"b":3})' in term.text, term.text
    assert "2 + 3 = 5" not in term.text  # paused: add has not run
    term.type(typed + "\r")
    term.read_until(re.escape(answer))
    term.prompt_after(1)
    assert f"answered] {outcome}" in term.text or f"answered {outcome}" in term.text, term.text
    term.type("\x04")
    assert term.close() == 0
    assert "Traceback" not in term.text
