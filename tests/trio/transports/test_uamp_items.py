"""Spec 000 items over a real WebSocket where no other test pins them."""

from __future__ import annotations

import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.wire import create_session, send, until
from tests.trio.transports.test_uamp_dialects import Recorder, serving

TIMEOUT = 15
TOOL = {
    "type": "function",
    "function": {"name": "search", "description": "d", "parameters": {"type": "object"}},
}


async def test_response_create_overrides_the_session_for_that_response_only() -> None:
    rec = Recorder()
    with trio.fail_after(TIMEOUT):
        async with serving([rec]) as base, open_ws(base + "/agents/rec/uamp") as ws:
            await create_session(ws, session={"instructions": "be long", "tools": [TOOL]})
            await send(ws, type="input.text", text="one")
            await send(
                ws,
                type="response.create",
                response={"instructions": "be brief", "tools": []},
                response_format={"type": "json_object"},
            )
            await until(ws, "response.done")
            await send(ws, type="input.text", text="two")
            await send(ws, type="response.create")
            await until(ws, "response.done")
    first, second = rec.requests
    assert (first.instructions, first.tools) == ("be brief", [])
    assert first.response_format is not None and first.response_format.type == "json_object"
    assert second.instructions == "be long" and [t.function.name for t in second.tools] == [
        "search"
    ]
    assert second.response_format is None


async def test_input_text_roles_and_context_reach_the_agent() -> None:
    rec = Recorder()
    with trio.fail_after(TIMEOUT):
        async with serving([rec]) as base, open_ws(base + "/agents/rec/uamp") as ws:
            await create_session(ws)
            await send(ws, type="input.text", text="answer in French", role="system")
            await send(ws, type="input.text", text="hello", context={"sender_id": "user_123"})
            await send(ws, type="response.create")
            done = await until(ws, "response.done")
    assert done[-1]["response"]["status"] == "completed"
    (request,) = rec.requests
    assert [(m.role, m.text) for m in request.messages] == [
        ("system", "answer in French"),
        ("user", "hello"),
    ]
    assert request.context == {"sender_id": "user_123"}
