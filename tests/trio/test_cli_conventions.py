"""Conventions users of uvicorn and vLLM expect (issue 32, item 7): ``--env-file``,
``--api-key`` and ``GET /version`` -- through a real ``uamp serve`` subprocess."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests._support.cli import Served
from uamp import __version__
from uamp_trio.envfile import load_env_file, parse_env

ENV_FILES = [
    ("A=1", {"A": "1"}),
    ("export A=1\n\n# a comment\nB = two words ", {"A": "1", "B": "two words"}),
    ("A=value # a comment", {"A": "value"}),
    ("A=value#not-a-comment", {"A": "value#not-a-comment"}),
    ("A='single $quoted # kept'", {"A": "single $quoted # kept"}),
    ('A="line\\nbreak \\"q\\""', {"A": 'line\nbreak "q"'}),
    ("A=", {"A": ""}),
]


@pytest.mark.parametrize(("text", "expected"), ENV_FILES)
def test_env_file_lines(text: str, expected: dict[str, str]) -> None:
    assert parse_env(text) == expected


@pytest.mark.parametrize("text", ["just words", "1A=x", 'A="unclosed', "A='unclosed"])
def test_a_bad_line_is_named_by_number_not_content(text: str) -> None:
    with pytest.raises(ValueError, match=r"^\.env:1: ") as caught:
        parse_env(text)
    assert "unclosed" not in str(caught.value) and "words" not in str(caught.value)


NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
VALUES = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=30)


@given(st.dictionaries(NAMES, VALUES, max_size=6))
def test_double_quoted_values_round_trip(variables: dict[str, str]) -> None:
    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    text = "\n".join(f"{name}={quoted(value)}" for name, value in variables.items())
    assert parse_env(text) == variables


def test_the_environment_wins_over_the_file(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("KEPT=from-file\nADDED=from-file\n")
    environ = {"KEPT": "from-shell"}
    assert load_env_file(str(env_file), environ) == ["ADDED"]
    assert environ == {"KEPT": "from-shell", "ADDED": "from-file"}


AGENT = """
import os
from uamp_trio.demo import DemoAgent

agent = DemoAgent(os.environ["MY_AGENT_NAME"])
"""


def _serve(tmp_path: Path, *args: str) -> Served:
    command = [sys.executable, "-m", "uamp_trio", "serve", "--port", "0", *args]
    return Served(command, cwd=tmp_path)


def test_env_file_is_read_before_the_agents_load(tmp_path: Path) -> None:
    (tmp_path / "named.py").write_text(AGENT)
    (tmp_path / ".env").write_text("# provider settings\nexport MY_AGENT_NAME='from-dotenv'\n")
    with _serve(tmp_path, "--env-file", ".env", "--agent", "named:agent") as srv:
        models = httpx.get(srv.url() + "/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["from-dotenv"]


def test_api_keys_on_the_command_line_and_version(tmp_path: Path) -> None:
    with _serve(tmp_path, "--api-key", "alice:s3cret-alice", "--api-key", "bare-key-1") as srv:
        base = srv.url()
        assert httpx.get(f"{base}/v1/models", timeout=10).status_code == 401
        for key in ("s3cret-alice", "bare-key-1"):
            headers = {"authorization": f"Bearer {key}"}
            assert httpx.get(f"{base}/v1/models", headers=headers, timeout=10).status_code == 200
        wrong = {"authorization": "Bearer alice:s3cret-alice"}
        assert httpx.get(f"{base}/v1/models", headers=wrong, timeout=10).status_code == 401
        version = httpx.get(f"{base}/version", timeout=10)  # public, like /healthz
        assert version.status_code == 200
        assert version.json() == {"name": "uamp", "version": __version__}
    assert "s3cret-alice" not in "\n".join(srv.lines) and "bare-key-1" not in "\n".join(srv.lines)
