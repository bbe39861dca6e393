"""Streams: what the agent wrote goes out before it waits; a client that leaves stops it."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator

import anyio
import httpx
import pytest

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.responder import TurnRequest

WAIT = 20.0


class Slow:
    """Writes "first", then waits for :attr:`go` (or until cancelled, noted in :attr:`stopped`)."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.stopped = threading.Event()
        self.finished = threading.Event()

    async def __call__(self, turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
        yield "first"
        try:
            with anyio.fail_after(WAIT):
                while not self.go.is_set():
                    await anyio.sleep(0.01)
        except anyio.get_cancelled_exc_class():
            self.stopped.set()
            raise
        yield " second"
        self.finished.set()


SLOW = Slow()


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with uvicorn_server(uamp_asgi.app([function_agent(SLOW, name="slow")])) as url:
        yield f"{url}/agents/slow"


def _body(text: str) -> dict[str, object]:
    return {"model": "slow", "stream": True, "messages": [{"role": "user", "content": text}]}


def test_a_piece_goes_out_before_the_agent_waits(base: str) -> None:
    SLOW.go.clear()
    with httpx.stream("POST", f"{base}/chat/completions", json=_body("a"), timeout=WAIT) as resp:
        lines = resp.iter_lines()
        texts: list[str] = []
        for line in lines:
            if line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0]["delta"].get("content")
                if delta:
                    texts.append(delta)
                    break
        assert texts == ["first"]  # while the agent still waits
        SLOW.go.set()
        rest = [line for line in lines if line.startswith("data: ")]
    assert rest[-1] == "data: [DONE]"


def test_a_client_that_leaves_mid_stream_stops_the_agent(base: str) -> None:
    SLOW.go.clear()
    SLOW.stopped.clear()
    SLOW.finished.clear()
    with httpx.stream("POST", f"{base}/chat/completions", json=_body("b"), timeout=WAIT) as resp:
        for line in resp.iter_lines():
            if "first" in line:
                break
    # The connection is closed here, with the agent still waiting.
    assert SLOW.stopped.wait(WAIT)
    SLOW.go.set()
    assert not SLOW.finished.is_set()


def test_a_json_reply_is_sized_not_chunked(base: str) -> None:
    """A whole JSON answer names its length: no chunked framing around one body."""
    for method in ("GET", "HEAD"):
        resp = httpx.request(method, f"{base}/v1/models", timeout=WAIT)
        assert resp.status_code == 200
        assert "transfer-encoding" not in resp.headers
        if method == "GET":
            size = len(resp.content)
            assert size > 0 and int(resp.headers["content-length"]) == size
        else:
            assert resp.content == b"" and int(resp.headers["content-length"]) == size
    refused = httpx.post(f"{base}/chat/completions", content=b"{", timeout=WAIT)
    assert refused.status_code == 400 and "transfer-encoding" not in refused.headers
    assert int(refused.headers["content-length"]) == len(refused.content)
