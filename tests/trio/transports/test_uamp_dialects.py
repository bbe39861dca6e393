"""The forms of UAMP that real clients send, over a real WebSocket.

Each test walks a whole event sequence as a client sees it: every form of
``session.create`` the specs show (000 5.1, 10.4 and spec 004's multiplexed
form, with the fields clients leave out), the client's capabilities and the
``context`` of its input reaching the agent and its tools,
``response.messages`` taken as the conversation, UUID ``event_id`` on every
server event, and unknown event types ignored (14.3).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support import wire
from tests._support.agents import TestAgent
from tests._support.wire import Event, recv, send, texts, until
from uamp_agents import agent, tool
from uamp_agents.bridge import serve_agent
from uamp_agents.providers import demo
from uamp_agents.tools import ToolContext
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, Responder, TurnRequest
from uamp_trio import App, DemoAgent
from uamp_trio.transports import uamp_ws

TIMEOUT = 15


class Recorder(TestAgent):
    """Answers with the last user message; records every request."""

    def __init__(self, name: str = "rec") -> None:
        self.name = name
        self.requests: list[TurnRequest] = []

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.requests.append(request)
        users = [m for m in request.messages if m.role == "user"]
        text = users[-1].text if users else "(nothing)"
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"echo: {text}")))


@asynccontextmanager
async def serving(agents: list[Responder]) -> AsyncIterator[str]:
    app = App(agents)
    app.mount(uamp_ws.mount)
    async with wire.serving(app) as server:
        yield f"ws://127.0.0.1:{server.port}"


async def raw(ws: Any, event: dict[str, Any]) -> None:
    await ws.send_message(orjson.dumps(event).decode())


#: What follows response.created when the Recorder answers.
SAID = ["response.delta", "response.done"]


def assert_uuid_ids(events: list[Event]) -> None:
    """Every server event carries a distinct UUID event_id (000 section 4)."""
    ids = [e["event_id"] for e in events]
    for event_id in ids:
        assert str(uuid.UUID(event_id)) == event_id
    assert len(set(ids)) == len(ids)


# --- session.create in every form ---------------------------------------------------

FORMS: list[tuple[str, str, dict[str, Any]]] = [
    (
        "5.1 full",
        "/agents/rec/uamp",
        {"uamp_version": "1.0", "session": {"modalities": ["text"], "instructions": "be brief"}},
    ),
    (
        "10.4 agent and token at the top",
        "/ws",
        {
            "uamp_version": "1.0",
            "agent": "rec",
            "token": "jwt-alice",
            "session": {"modalities": ["text"]},
        },
    ),
    ("004 multiplexed", "/ws", {"session": {"agent": "rec", "token": "tok"}}),
    (
        "no modalities",
        "/agents/rec/uamp",
        {"uamp_version": "1.0", "session": {"instructions": "x"}},
    ),
    ("no session at all", "/agents/rec/uamp", {"uamp_version": "1.0"}),
    ("no version", "/agents/rec/uamp", {"session": {"modalities": ["text"]}}),
]


@pytest.mark.parametrize(("label", "path", "create"), FORMS, ids=[f[0] for f in FORMS])
async def test_every_session_create_form_opens_a_text_session(
    label: str, path: str, create: dict[str, Any]
) -> None:
    rec, other = Recorder(), Recorder("other")
    with trio.fail_after(TIMEOUT):
        async with serving([rec, other]) as base, open_ws(base + path) as ws:
            await raw(ws, {"type": "session.create", "event_id": str(uuid.uuid4()), **create})
            created = await recv(ws)
            assert created["type"] == "session.created", created
            assert created["agent"] == "rec"
            assert created["uamp_version"] == "1.0"
            assert created["session"]["config"]["modalities"] == ["text"]
            caps = await recv(ws)
            assert caps["type"] == "capabilities" and caps["capabilities"]["id"] == "rec"
            await wire.ask(ws, "hello")
            events = await until(ws, "response.done")
            assert [e["type"] for e in events] == ["response.created", *SAID]
            assert texts(events) == "echo: hello"
            assert_uuid_ids([created, caps, *events])
    (request,) = rec.requests
    assert request.modalities == ["text"]
    if "token" in str(create):
        assert request.token in ("jwt-alice", "tok")


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    (
        "modalities not a list",
        {"uamp_version": "1.0", "session": {"modalities": "text"}},
        "session.modalities",
    ),
    ("session not an object", {"uamp_version": "1.0", "session": 5}, "session"),
    (
        "version not a string",
        {"uamp_version": 1, "session": {"modalities": ["text"]}},
        "uamp_version",
    ),
    (
        "a tool without its function",
        {
            "uamp_version": "1.0",
            "session": {"modalities": ["text"], "tools": [{"type": "function"}]},
        },
        "session.tools[0].function",
    ),
]


@pytest.mark.parametrize(("label", "create", "field"), REFUSED, ids=[r[0] for r in REFUSED])
async def test_a_refused_session_create_names_the_field_and_the_connection_goes_on(
    label: str, create: dict[str, Any], field: str
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving([Recorder()]) as base, open_ws(base + "/agents/rec/uamp") as ws:
            bad_id = str(uuid.uuid4())
            await raw(ws, {"type": "session.create", "event_id": bad_id, **create})
            error = await recv(ws)
            assert error["type"] == "session.error"
            assert error["error"]["code"] == "invalid_event"
            assert f"'{field}'" in error["error"]["message"]
            assert error["error"]["details"] == {
                "event_id": bad_id,
                "event_type": "session.create",
                "field": field,
            }
            assert_uuid_ids([error])
            # The peer keeps working: a good session.create on the same socket.
            await raw(ws, {"type": "session.create", "session": {}})
            assert (await recv(ws))["type"] == "session.created"


#: Refusals after a good session.create, each naming the field to blame:
#: (label, the event, the error event's type, its code, details.field).
FIELD_REFUSALS: list[tuple[str, dict[str, Any], str, str, str]] = [
    (
        "unknown session",
        {"type": "input.text", "text": "x", "session_id": "sess_nope"},
        "session.error",
        "unknown_session",
        "session_id",
    ),
    (
        "a second session for another agent",
        {"type": "session.create", "uamp_version": "1.0", "agent": "nobody", "session": {}},
        "session.error",
        "agent_offline",
        "agent",
    ),
    (
        "an unsupported major version",
        {"type": "session.create", "uamp_version": "2.0", "session": {}},
        "response.error",
        "version_mismatch",
        "uamp_version",
    ),
    (
        "a text without its text",
        {"type": "input.text", "role": "user"},
        "session.error",
        "invalid_event",
        "text",
    ),
    (
        "ending another call",
        {"type": "voice.end", "call_id": "call_other"},
        "session.error",
        "unknown_call",
        "call_id",
    ),
]


@pytest.mark.parametrize(
    ("label", "event", "etype", "code", "field"),
    FIELD_REFUSALS,
    ids=[r[0] for r in FIELD_REFUSALS],
)
async def test_refusals_name_the_field_in_details(
    label: str, event: dict[str, Any], etype: str, code: str, field: str
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving([DemoAgent()]) as base, open_ws(base + "/agents/demo/uamp") as ws:
            await wire.create_session(ws)
            if code == "unknown_call":  # a call to end, under another id
                await send(ws, type="voice.invite", call_id="call_mine")
                assert (await recv(ws))["type"] == "voice.accept"
            await raw(ws, event)
            error = await recv(ws)
            assert (error["type"], error["error"]["code"]) == (etype, code)
            assert error["error"]["details"]["field"] == field
            # The session goes on.
            await wire.ask(ws, "still here")
            assert texts(await until(ws, "response.done")) == "You said: still here"


# --- capabilities and context reach the agent -----------------------------------------


async def test_client_capabilities_are_kept_merged_and_seen_by_the_agent() -> None:
    rec = Recorder()
    declared = {
        "id": "web-app",
        "provider": "robutler",
        "modalities": ["text", "image"],
        "widgets": ["chart"],
        "extensions": {"platform": "web"},
    }
    with trio.fail_after(TIMEOUT):
        async with serving([rec]) as base, open_ws(base + "/agents/rec/uamp") as ws:
            await raw(
                ws,
                {
                    "type": "session.create",
                    "uamp_version": "1.0",
                    "session": {"modalities": ["text"]},
                    "client_capabilities": declared,
                },
            )
            assert (await recv(ws))["type"] == "session.created"
            # Section 9.1: capabilities follows, the agent's with the client's echoed ...
            announced = await recv(ws)
            assert announced["type"] == "capabilities"
            assert announced["capabilities"]["id"] == "rec"
            assert announced["capabilities"]["extensions"]["client_capabilities"] == declared
            # ... and capabilities.query answers the same view.
            await send(ws, type="capabilities.query")
            first = await recv(ws)
            assert first["type"] == "capabilities"
            assert first["capabilities"] == announced["capabilities"]
            await send(ws, type="input.text", text="one")
            await send(ws, type="response.create")
            await until(ws, "response.done")
            # Mid-session: the client can no longer show images; it says so
            # without repeating its widgets.
            await send(
                ws,
                type="client.capabilities",
                capabilities={
                    "id": "web-app",
                    "provider": "robutler",
                    "modalities": ["text"],
                    "extensions": {"low_bandwidth": True},
                },
            )
            await send(ws, type="capabilities.query")
            second = await recv(ws)
            merged = second["capabilities"]["extensions"]["client_capabilities"]
            assert merged == {
                "id": "web-app",
                "provider": "robutler",
                "modalities": ["text"],
                "widgets": ["chart"],
                "extensions": {"platform": "web", "low_bandwidth": True},
            }
            await send(ws, type="input.text", text="two")
            await send(ws, type="response.create")
            await until(ws, "response.done")
    first_turn, second_turn = rec.requests
    assert first_turn.client_capabilities is not None
    assert first_turn.client_capabilities.modalities == ["text", "image"]
    assert second_turn.client_capabilities is not None
    assert second_turn.client_capabilities.modalities == ["text"]
    assert second_turn.client_capabilities.widgets == ["chart"]


async def test_a_session_without_client_capabilities_reports_none() -> None:
    rec = Recorder()
    with trio.fail_after(TIMEOUT):
        async with serving([rec]) as base, open_ws(base + "/agents/rec/uamp") as ws:
            await send(ws, type="session.create", uamp_version="1.0", session={})
            assert (await recv(ws))["type"] == "session.created"
            announced = await recv(ws)
            assert announced["type"] == "capabilities"
            assert announced["capabilities"]["id"] == "rec"
            await send(ws, type="capabilities.query")
            caps = (await recv(ws))["capabilities"]
            assert "client_capabilities" not in (caps.get("extensions") or {})
            assert caps == announced["capabilities"]
            await send(ws, type="input.text", text="x")
            await send(ws, type="response.create")
            await until(ws, "response.done")
    assert rec.requests[0].client_capabilities is None and rec.requests[0].context == {}


async def whoami(ctx: ToolContext, query: str) -> str:
    """Who sent the message, in which chat, and what the client can show."""
    uamp = ctx.metadata["uamp"]
    context, client = uamp["context"], uamp["client_capabilities"] or {}
    who = f"{context['sender_id']} via {context['channel']} ({context['mood']})"
    return f"{who}, sees {client.get('modalities')}"


async def test_input_context_reaches_the_agent_and_its_tools() -> None:
    rec = Recorder()
    runtime = serve_agent(
        agent(model=demo(), tools=[tool(whoami, thread=False)], name="ctx"), name="ctx"
    )
    # No chat_id: an input naming a chat is a chat message (UAMP 7.1).
    context = {"sender_id": "user_123", "channel": "sms", "mood": "curious"}
    with trio.fail_after(TIMEOUT):
        async with serving([rec, runtime]) as base, open_ws(base + "/ws") as ws:
            rec_sid = await wire.create_session(ws, agent="rec")
            ctx_sid = await wire.create_session(
                ws,
                agent="ctx",
                client_capabilities={"id": "cli", "provider": "uamp", "modalities": ["text"]},
            )
            await send(ws, type="input.text", session_id=rec_sid, text="hi", context=context)
            await send(ws, type="response.create", session_id=rec_sid)
            await until(ws, "response.done")
            await send(
                ws,
                type="input.text",
                session_id=ctx_sid,
                text="please call whoami",
                context=context,
            )
            await send(ws, type="response.create", session_id=ctx_sid)
            events = await until(ws, "response.done")
    assert rec.requests[0].context == context
    results = [
        e["delta"]["tool_result"]["result"]
        for e in events
        if e["type"] == "response.delta" and e["delta"]["type"] == "tool_result"
    ]
    assert results == ["user_123 via sms (curious), sees ['text']"]
    said = "".join(e["delta"].get("text", "") for e in events if e["type"] == "response.delta")
    assert said.endswith("Tool whoami returned: user_123 via sms (curious), sees ['text']")


async def test_context_belongs_to_the_response_it_came_with() -> None:
    rec = Recorder()
    with trio.fail_after(TIMEOUT):
        async with serving([rec]) as base, open_ws(base + "/agents/rec/uamp") as ws:
            await wire.create_session(ws)
            await send(ws, type="input.text", text="a", context={"thread": "t1", "k": 1})
            await send(ws, type="input.text", text="b", context={"k": 2})
            await send(ws, type="response.create")
            await until(ws, "response.done")
            await send(ws, type="input.text", text="c")
            await send(ws, type="response.create")
            await until(ws, "response.done")
    assert [r.context for r in rec.requests] == [{"thread": "t1", "k": 2}, {}]


# --- response.messages is the conversation --------------------------------------------


async def test_response_messages_are_the_conversation() -> None:
    """Robutler's LLM-proxy form: no input, the conversation on response.create."""
    rec = Recorder()
    conversation = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "second question"},
    ]
    with trio.fail_after(TIMEOUT):
        async with serving([rec, DemoAgent()]) as base, open_ws(base + "/agents/rec/uamp") as ws:
            await raw(
                ws,
                {
                    "type": "session.create",
                    "uamp_version": "1.0",
                    "session": {
                        "modalities": ["text"],
                        "extensions": {"X-Model": "m", "temperature": 0.2},
                    },
                },
            )
            assert (await recv(ws))["type"] == "session.created"
            await recv(ws)
            await send(
                ws, type="response.create", response={"model": "m", "messages": conversation}
            )
            events = await until(ws, "response.done")
            assert texts(events) == "echo: second question"
            # The next response.messages replaces the history, as input.text.messages does.
            again = [{"role": "user", "content": "fresh start"}]
            await send(ws, type="response.create", response={"messages": again})
            assert texts(await until(ws, "response.done")) == "echo: fresh start"
    first, second = rec.requests
    assert [(m.role, m.text) for m in first.messages] == [
        (c["role"], c["content"]) for c in conversation
    ]
    assert first.extensions == {"X-Model": "m", "temperature": 0.2}
    assert [(m.role, m.text) for m in second.messages] == [("user", "fresh start")]


async def test_response_messages_with_input_text_are_not_doubled() -> None:
    rec = Recorder()
    with trio.fail_after(TIMEOUT):
        async with serving([rec]) as base, open_ws(base + "/agents/rec/uamp") as ws:
            await wire.create_session(ws)
            await send(ws, type="input.text", text="the question")
            await send(
                ws,
                type="response.create",
                response={
                    "messages": [
                        {"role": "system", "content": "s"},
                        {"role": "user", "content": "the question"},
                    ]
                },
            )
            await until(ws, "response.done")
    assert [(m.role, m.text) for m in rec.requests[0].messages] == [
        ("system", "s"),
        ("user", "the question"),
    ]


# --- unknown event types are logged and ignored (14.3) ---------------------------------


async def test_unknown_event_types_are_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    rec = Recorder()
    caplog.set_level("INFO", logger="uamp_trio.sessions")
    with trio.fail_after(TIMEOUT):
        async with serving([rec]) as base, open_ws(base + "/agents/rec/uamp") as ws:
            await wire.create_session(ws)
            await send(ws, type="future.thing", payload={"x": 1})
            await send(ws, type="input.text", text="still here")
            await send(ws, type="response.create")
            events = await until(ws, "response.done")
    assert [e["type"] for e in events] == ["response.created", "response.delta", "response.done"]
    assert texts(events) == "echo: still here"
    assert any("future.thing" in r.getMessage() for r in caplog.records)


async def test_model_settings_in_session_extensions_reach_the_model() -> None:
    """``max_tokens`` in session.extensions: the demo model stops after two words."""
    with trio.fail_after(TIMEOUT):
        async with (
            serving([serve_agent(agent(model=demo(), name="d"))]) as base,
            open_ws(base + "/agents/d/uamp") as ws,
        ):
            await wire.create_session(ws, session={"extensions": {"max_tokens": 2}})
            await send(
                ws,
                type="response.create",
                response={"messages": [{"role": "user", "content": "hello there friend"}]},
            )
            events = await until(ws, "response.done")
    assert texts(events) == "You said:"
    assert events[-1]["response"]["status"] == "completed"


# --- session.error speaks the spec's codes (6.3) ---------------------------------------


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (401, "invalid_token", "unauthorized"),
        (429, "too_many_requests", "rate_limited"),
        (504, "upstream_timeout", "timeout"),
        (408, "request_timeout", "timeout"),
        (404, "agent_not_found", "agent_offline"),
        (503, "agent_offline", "agent_offline"),
    ],
)
def test_a_refused_upgrade_is_a_session_error_with_the_spec_code(
    status: int, code: str, expected: str
) -> None:
    from uamp_trio.engines.http import HTTPError
    from uamp_trio.hosting.middleware import render_error

    body = orjson.loads(render_error("uamp", HTTPError(status, "no", code=code)).body)
    assert body["type"] == "session.error" and body["error"]["code"] == expected
    assert str(uuid.UUID(body["event_id"])) == body["event_id"]
    assert body["error"].get("details") == (None if code == expected else {"reason": code})


async def test_an_idle_session_gets_the_timeout_code_then_its_end() -> None:
    from uamp_trio.hosting.sessions import SessionLimits

    app = App([Recorder()])
    limits = SessionLimits(idle_timeout=0.3, keepalive_interval=10)
    app.mount(lambda a: uamp_ws.mount(a, uamp_ws.UampWebSocketConfig(limits=limits)))
    with trio.fail_after(TIMEOUT):
        async with (
            wire.serving(app) as server,
            open_ws(f"ws://127.0.0.1:{server.port}/agents/rec/uamp") as ws,
        ):
            sid = await wire.create_session(ws)
            error, end = await recv(ws), await recv(ws)
    assert (error["type"], error["error"]["code"], error["session_id"]) == (
        "session.error",
        "timeout",
        sid,
    )
    assert (end["type"], end["reason"]) == ("session.end", "timeout")
    assert_uuid_ids([error, end])
