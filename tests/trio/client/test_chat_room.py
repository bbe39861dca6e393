"""``uamp chat --chat ROOM``: two terminals (subprocesses) in one room of a real ``uamp serve``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import orjson
import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.cli import read_until as _read_until
from tests._support.cli import spawn, uamp_serve
from tests._support.wire import create_session, send


@pytest.fixture
def server_url() -> Iterator[str]:
    with uamp_serve() as url:
        yield url


def _join(url: str, name: str, *extra: str) -> subprocess.Popen[str]:
    proc = spawn(
        "chat",
        url,
        "--chat",
        "lobby",
        "--name",
        name,
        *extra,
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _read_until(proc, "[joined]")
    return proc


def _say(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def _typing_from_a_third(url: str) -> None:
    """A raw UAMP client joins the lobby as "carol" and starts typing."""

    async def main() -> None:
        ws_url = url.replace("http://", "ws://") + "/agents/demo/uamp"
        async with open_ws(ws_url) as ws:
            settings = {"extensions": {"chat": {"username": "carol"}}}
            await create_session(ws, chat="lobby", session=settings)
            await send(ws, type="input.typing", is_typing=True)
            while True:  # until the typing shows; the test's reader waits for it
                event = orjson.loads(await ws.get_message())
                if event["type"] == "message.created" and "done" in event["message"]["content"]:
                    return

    trio.run(main)


def test_two_terminals_in_one_room(server_url: str) -> None:
    alice = _join(server_url, "alice", "--respond", "mention")
    bob = None
    try:
        bob = _join(server_url, "bob")
        assert "bob joined" in _read_until(alice, "bob joined")
        _say(bob, "hi alice")
        assert "bob: hi alice" in _read_until(alice, "bob: hi alice")
        # Alice's terminal marked it read: Bob sees the receipt.
        assert "alice read up to #1" in _read_until(bob, "read up to")
        _say(alice, "@demo ping")
        # The agent's answer streams into both terminals.
        assert "demo: You said: @demo ping" in _read_until(bob, "You said: @demo ping")
        assert "demo: You said: @demo ping" in _read_until(alice, "You said: @demo ping")
        _say(alice, "/who")
        who = _read_until(alice, "[who]")
        assert "bob" in who and "demo" in who
        import threading

        third = threading.Thread(target=_typing_from_a_third, args=(server_url,))
        third.start()
        assert "carol is typing" in _read_until(bob, "carol is typing")
        _say(bob, "done")
        third.join(20)
        _say(bob, "/quit")
        assert bob.wait(20) == 0
        assert "bob left" in _read_until(alice, "bob left")
        _say(alice, "/quit")
        assert alice.wait(20) == 0
    finally:
        for proc in (alice, bob):
            if proc is not None and proc.poll() is None:
                proc.kill()
