"""``uamp chat`` as a real subprocess against a real ``uamp serve`` subprocess."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._support.cli import read_until as _read_until
from tests._support.cli import uamp, uamp_serve
from uamp_trio.client.chat import chat_url


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with uamp_serve() as url:
        yield url


def chat(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return uamp("chat", *args, stdin=stdin, timeout=30)


def test_chat_once_prints_the_streamed_answer_and_usage(server_url: str) -> None:
    done = chat(server_url, "--once", "hello there")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].strip(), done.stdout  # the answer, plain text (stdout is a pipe)
    assert "hello there" in lines[0]
    assert any(line.startswith("[usage] ") and "total" in line for line in lines)
    assert "\x1b[" not in done.stdout  # no terminal colours in a pipe


def test_chat_reads_lines_until_quit(server_url: str) -> None:
    ws = server_url.replace("http://", "ws://") + "/agents/demo/uamp"
    done = chat(ws, stdin="first line\nsecond line\n/quit\n")
    assert done.returncode == 0, done.stderr
    assert "first line" in done.stdout and "second line" in done.stdout
    assert done.stdout.count("[usage]") == 2


def test_chat_reports_an_unknown_agent_and_exits_1(server_url: str) -> None:
    done = chat(server_url, "--agent", "nobody", "--once", "hi")
    assert done.returncode == 1
    assert "agent_offline" in done.stderr and "nobody" in done.stderr


def test_chat_reports_a_refused_connection() -> None:
    done = chat("127.0.0.1:9", "--once", "hi")
    assert done.returncode == 1 and done.stderr.startswith("uamp chat:")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("127.0.0.1:8765", "ws://127.0.0.1:8765/ws"),
        ("http://h:1", "ws://h:1/ws"),
        ("https://h:1/", "wss://h:1/ws"),
        ("ws://h:1/agents/a/uamp", "ws://h:1/agents/a/uamp"),
        # An agent's root URL, as every other client is given it.
        ("http://h:1/agents/demo", "ws://h:1/agents/demo/uamp"),
        ("http://h:1/agents/demo/", "ws://h:1/agents/demo/uamp"),
        ("http://h:1/agents/demo/v1", "ws://h:1/agents/demo/uamp"),
        ("ws://h:1/agents/demo", "ws://h:1/agents/demo/uamp"),
        ("https://h/api/agents/demo", "wss://h/api/agents/demo/uamp"),
    ],
)
def test_chat_url(given: str, expected: str) -> None:
    assert chat_url(given) == expected


def test_chat_finds_the_websocket_of_an_agent_root_url_and_quiet_prints_the_answer_alone(
    server_url: str,
) -> None:
    done = chat(f"{server_url}/agents/demo", "--once", "hello there", "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "You said: hello there\n"
    assert done.stderr == ""


def test_chat_json_writes_each_event_as_one_json_line(server_url: str) -> None:
    done = chat(f"{server_url}/agents/demo", "--once", "hello there", "--json")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    types = [e["type"] for e in events]
    assert types[-1] == "response.done" and "response.delta" in types, types
    text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "response.delta")
    assert text == "You said: hello there"


@pytest.mark.parametrize(
    ("pieces", "width", "lines", "held"),
    [
        (["tick 0 ", "tick 1 ", "tick"], 80, [], "tick 0 tick 1 tick"),
        (["one\ntw", "o\n"], 80, ["one", "two"], ""),
        (["aaaa bbbb cccc"], 10, ["aaaa bbbb"], "cccc"),
        (["x" * 25], 10, ["x" * 10, "x" * 10], "x" * 5),
    ],
    ids=["partial", "newlines", "word wrap", "no space"],
)
def test_above_a_prompt_text_is_written_in_whole_lines(
    pieces: list[str], width: int, lines: list[str], held: str
) -> None:
    import io

    from uamp_trio.client.chat import _Printer

    out = io.StringIO()
    printer = _Printer(out, rich=False)
    printer.width = width
    for piece in pieces:
        printer.text(piece)
    assert out.getvalue().splitlines() == lines
    assert printer.pending == held


def test_chat_survives_a_server_restart(tmp_path: Path) -> None:
    import socket

    from tests._support.cli import spawn

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # The client's WebSocket is in flight when the first server stops: --grace 1
    # cuts it after a second instead of the default ten.
    store = ("--port", str(port), "--store", str(tmp_path / "sessions.db"), "--grace", "1")
    with uamp_serve(*store):
        proc = spawn("chat", f"127.0.0.1:{port}", stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdin is not None
        try:
            proc.stdin.write("first line\n")
            proc.stdin.flush()
            first = _read_until(proc, "[usage]")
        except BaseException:
            proc.kill()
            raise
    try:
        # The server is gone; a new one on the same port and store.
        with uamp_serve(*store):
            try:
                proc.stdin.write("second line\n")
                proc.stdin.flush()
            except BrokenPipeError:
                raise AssertionError(
                    f"chat exited ({proc.wait()}): {proc.stderr.read() if proc.stderr else ''}"
                ) from None
            second = _read_until(proc, "[usage]")
            proc.stdin.write("/quit\n")
            proc.stdin.flush()
            assert proc.wait(20) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "first line" in first
    assert "second line" in second
    assert "[reconnected]" not in second  # resumed, not replaced
