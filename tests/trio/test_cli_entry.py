"""The ``uamp`` entry point imports only what the subcommand needs (issue 32, item 5).

Speed itself is measured by ``bench/startup.py``, never asserted here; these
tests check the mechanism: which modules a command loads, and that the lazy
table says the same as the parser built in full.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from uamp_trio.command_line import COMMANDS, build_parser

#: Run in a subprocess: ``uamp ARGS`` in-process, then the heavy modules it loaded.
PROBE = """
import sys
from uamp_trio.command_line import main
try:
    main({args!r})
except SystemExit:
    pass
heavy = ("trio", "h2", "httpx", "uamp_proto.codec", "uamp_trio.app", "google.protobuf")
print(sorted(name for name in heavy if name in sys.modules))
"""


def _loaded(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=list(args))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("args", [["--version"], ["--help"], []], ids=["version", "help", "bare"])
def test_version_and_help_load_no_server_module(args: list[str]) -> None:
    assert _loaded(*args) == "[]"


def test_chat_help_does_not_load_the_server() -> None:
    assert "uamp_trio.app" not in _loaded("chat", "--help")


def test_serve_help_loads_the_server() -> None:
    """The probe sees a heavy import when there is one."""
    assert "trio" in _loaded("serve", "--help")


def test_the_lazy_listing_is_the_full_parsers() -> None:
    assert build_parser(None).format_help() == build_parser().format_help()
    assert [c.name for c in COMMANDS] == list(build_parser().commands or {})
