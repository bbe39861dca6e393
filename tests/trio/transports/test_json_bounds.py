"""JSON with too many values is refused before it is parsed, on every transport (issue 14).

A server with ``max_json_values=1000`` (``uamp serve --max-json-values``)
gets otherwise valid requests carrying 1,500 values; each transport answers
in its own error format, the agent does not run, and a WebSocket goes on
working. Text full of commas and brackets is one value: such a request is
served. Real server on 127.0.0.1, httpx and websockets as clients.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
from websockets.sync.client import connect

from tests._support.agents import TestAgent
from tests._support.envelopes import envelope
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.envelope import prefix_frame, read_error, split_frames
from uamp_proto.envelope import decode_envelope, encode_envelope
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app

LIMIT = 1000
PAD = list(range(1500))  # 1,500 values: over the limit
CSV = "a,b,[c],{d}\n" * 2000  # one value, with 10,000 separators and brackets in it


class Counting(TestAgent):
    """Says ``ok``, counting its runs."""

    name = "jb"

    def __init__(self) -> None:
        self.runs = 0

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.runs += 1
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))


@pytest.fixture
def served(thread_server: Callable[..., Any]) -> Iterator[tuple[str, Counting]]:
    agent = Counting()
    server = thread_server(create_app([agent]), max_json_values=LIMIT)
    yield f"127.0.0.1:{server.port}", agent


def chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": "jb", "messages": [{"role": "user", "content": content}], **extra}


def message(text: str) -> dict[str, Any]:
    return {"role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": text}]}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/agents/jb/chat/completions", chat("hi", metadata={"pad": PAD})),
        ("/agents/jb/agui", {"threadId": "t", "runId": "r", "messages": [], "pad": PAD}),
        ("/agents/jb/tasks", {"message": message("hi"), "pad": PAD}),
        ("/agents/jb/events", {"type": "session.create", "uamp_version": "1.0", "pad": PAD}),
    ],
    ids=["completions", "agui", "a2a-rest", "sse-events"],
)
def test_http_routes_answer_413(served: tuple[str, Counting], path: str, body: Any) -> None:
    base, agent = served
    resp = httpx.post(f"http://{base}{path}", content=orjson.dumps(body), timeout=15)
    assert resp.status_code == 413, resp.text
    error = resp.json()["error"]
    assert error["code"] == "json_too_complex"
    assert f"more than {LIMIT} JSON values" in error["message"]
    assert agent.runs == 0


@pytest.mark.parametrize(
    ("path", "call"),
    [
        ("/agents/jb/a2a", {"method": "message/send", "params": {"message": message("hi")}}),
        ("/agents/jb/acp", {"method": "initialize", "params": {"protocolVersion": 1}}),
    ],
    ids=["a2a-jsonrpc", "acp-http"],
)
def test_jsonrpc_routes_answer_parse_error(
    served: tuple[str, Counting], path: str, call: dict[str, Any]
) -> None:
    base, agent = served
    payload = {"jsonrpc": "2.0", "id": 7, **call, "pad": PAD}
    resp = httpx.post(f"http://{base}{path}", content=orjson.dumps(payload), timeout=15)
    answer = resp.json()
    assert answer["jsonrpc"] == "2.0" and answer["id"] is None, answer
    assert answer["error"]["code"] == -32700
    assert f"more than {LIMIT} JSON values" in answer["error"]["message"]
    assert agent.runs == 0
    # Without the padding the same call is answered (it is the size that was refused).
    payload.pop("pad")
    resp = httpx.post(f"http://{base}{path}", content=orjson.dumps(payload), timeout=15)
    assert resp.json()["id"] == 7, resp.text


def test_text_full_of_separators_is_served(served: tuple[str, Counting]) -> None:
    base, agent = served
    body = orjson.dumps(chat(CSV))
    resp = httpx.post(f"http://{base}/agents/jb/chat/completions", content=body, timeout=15)
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "ok"
    assert agent.runs == 1


def test_uamp_websocket_answers_an_error_event_and_goes_on(served: tuple[str, Counting]) -> None:
    base, agent = served
    with connect(f"ws://{base}/agents/jb/uamp", max_size=None) as ws:
        ws.send(orjson.dumps({"type": "ping", "pad": PAD}).decode())
        error = orjson.loads(ws.recv(timeout=10))
        assert error["type"] == "session.error", error
        assert f"more than {LIMIT} JSON values" in error["error"]["message"]
        ws.send('{"type":"ping"}')
        assert orjson.loads(ws.recv(timeout=10))["type"] == "pong"
        # Text with separators in it is one value.
        ws.send(orjson.dumps({"type": "ping", "note": CSV}).decode())
        assert orjson.loads(ws.recv(timeout=10))["type"] == "pong"
    assert agent.runs == 0


def test_realtime_websocket_answers_an_error_event(served: tuple[str, Counting]) -> None:
    base, agent = served
    with connect(f"ws://{base}/agents/jb/realtime", max_size=None) as ws:
        assert orjson.loads(ws.recv(timeout=10))["type"] == "session.created"
        ws.send(orjson.dumps({"type": "response.create", "pad": PAD}).decode())
        error = orjson.loads(ws.recv(timeout=10))
        assert error["type"] == "error", error
        assert error["error"]["code"] == "json_too_complex"
        ws.send(orjson.dumps({"type": "fuzz.sync", "event_id": "s1"}).decode())
        sync = orjson.loads(ws.recv(timeout=10))
        assert sync["type"] == "error" and sync["error"]["event_id"] == "s1", sync
    assert agent.runs == 0


def test_acp_websocket_answers_parse_error(served: tuple[str, Counting]) -> None:
    base, _ = served
    call = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
    with connect(f"ws://{base}/agents/jb/acp/stream", max_size=None) as ws:
        ws.send(orjson.dumps({**call, "pad": PAD}).decode())
        answer = orjson.loads(ws.recv(timeout=10))
        assert answer["error"]["code"] == -32700 and answer["id"] is None, answer
        ws.send(orjson.dumps(call).decode())
        assert orjson.loads(ws.recv(timeout=10))["id"] == 1


def padded_envelope() -> tuple[bytes, bytes]:
    """A signed spec 003 envelope to the agent, and the same with 1,500 values added."""
    plain = encode_envelope(envelope(to="urn:uamp:agent:jb", text="hi"))
    padded = orjson.dumps({**orjson.loads(plain), "pad": PAD})
    return plain, padded


def test_envelope_http_answers_4_13(served: tuple[str, Counting]) -> None:
    base, agent = served
    plain, padded = padded_envelope()
    url = f"http://{base}/agents/jb/v1/messages"
    headers = {"content-type": "application/uamp+json;v=1"}
    resp = httpx.post(url, content=padded, headers=headers, timeout=15)
    assert resp.status_code == 413, resp.text
    code, why, _ = read_error(decode_envelope(resp.content))
    assert code == "4.13" and f"more than {LIMIT} JSON values" in why
    assert agent.runs == 0
    # Without the padding the same envelope is taken (it is the count that was refused).
    resp = httpx.post(url, content=plain, headers=headers, timeout=15)
    assert resp.status_code == 202, resp.text


def test_envelope_websocket_answers_4_13(served: tuple[str, Counting]) -> None:
    base, agent = served
    _, padded = padded_envelope()
    with connect(f"ws://{base}/agents/jb/uamp/1/ws", max_size=None) as ws:
        ws.send(prefix_frame(padded))
        reply = ws.recv(timeout=10)
        assert isinstance(reply, bytes)
        (frame,) = split_frames(reply, 1 << 24)
        code, why, _ = read_error(decode_envelope(frame))
    assert code == "4.13" and f"more than {LIMIT} JSON values" in why
    assert agent.runs == 0


# --- nesting: one limit for what is parsed and what is written (issue 29) -------------------

#: 300 levels: orjson parses it (up to 1,024) but writes at most 254 levels (the
#: client writes it with the standard library).
DEEP: Any = "bottom"
for _ in range(300):
    DEEP = {"a": DEEP}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/agents/jb/chat/completions", chat("hi", metadata=DEEP)),
        (
            "/agents/jb/events",
            {"type": "session.create", "uamp_version": "1.0", "session": {"extensions": DEEP}},
        ),
    ],
    ids=["completions", "sse-events"],
)
def test_deep_json_is_413_without_a_traceback(
    served: tuple[str, Counting], path: str, body: Any, caplog: pytest.LogCaptureFixture
) -> None:
    base, agent = served
    resp = httpx.post(f"http://{base}{path}", content=json.dumps(body), timeout=15)
    assert resp.status_code == 413, resp.text
    assert resp.json()["error"]["code"] == "json_too_complex"
    assert "128 levels deep" in resp.json()["error"]["message"]
    assert agent.runs == 0
    assert not [r for r in caplog.records if r.exc_info]


def test_deep_json_errors_its_message_only_on_a_multiplexed_socket(
    served: tuple[str, Counting], caplog: pytest.LogCaptureFixture
) -> None:
    base, agent = served

    def create(ws: Any, **session: Any) -> dict[str, Any]:
        event = {"type": "session.create", "uamp_version": "1.0", "agent": "jb"}
        ws.send(json.dumps({**event, "session": {"modalities": ["text"], **session}}))
        return orjson.loads(ws.recv(timeout=10))  # type: ignore[no-any-return]

    def answered(ws: Any, sid: str) -> str:
        ws.send(orjson.dumps({"type": "input.text", "text": "x", "session_id": sid}).decode())
        ws.send(orjson.dumps({"type": "response.create", "session_id": sid}).decode())
        while (event := orjson.loads(ws.recv(timeout=10)))["type"] != "response.done":
            pass
        return str(event["session_id"])

    with connect(f"ws://{base}/ws", max_size=None) as ws:
        first = create(ws)
        assert first["type"] == "session.created", first
        sid = first["session_id"]
        assert orjson.loads(ws.recv(timeout=10))["type"] == "capabilities"
        refused = create(ws, extensions=DEEP)
        assert refused["type"] == "session.error", refused
        assert "128 levels deep" in refused["error"]["message"]
        update = {"type": "session.update", "session_id": sid, "session": {"extensions": DEEP}}
        ws.send(json.dumps(update))
        refused = orjson.loads(ws.recv(timeout=10))
        assert refused["type"] == "session.error", refused
        # The socket and its session go on.
        assert answered(ws, sid) == sid
        second = create(ws)
        assert second["type"] == "session.created", second
    assert agent.runs == 1
    assert not [r for r in caplog.records if r.exc_info]
