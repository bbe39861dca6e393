"""Interop: trio-websocket, an independent WebSocket client, speaks UAMP to ``uamp serve``'s app.

The client side here is plain JSON over trio-websocket -- no uamp code -- and
follows the spec's own examples (UAMP sections 3.1, 3.2 and 10.4).
"""

from __future__ import annotations

import json
from typing import Any

import trio
from trio_websocket import open_websocket_url

from uamp_trio import DemoAgent, Server, create_app


async def test_spec_flows_with_an_independent_client() -> None:
    app = create_app([DemoAgent("alice"), DemoAgent("bob")])
    server = Server(app, port=0, shutdown_grace=0.5)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            url = f"ws://127.0.0.1:{server.port}/ws"
            async with open_websocket_url(url, subprotocols=["uamp"]) as ws:
                assert ws.subprotocol == "uamp"

                async def send(event: dict[str, Any]) -> None:
                    await ws.send_message(json.dumps(event))

                async def recv() -> dict[str, Any]:
                    return json.loads(await ws.get_message())  # type: ignore[no-any-return]

                # Section 10.4: two sessions on one WebSocket, one per agent.
                sessions = {}
                for name in ("alice", "bob"):
                    await send(
                        {
                            "type": "session.create",
                            "event_id": f"c-{name}",
                            "uamp_version": "1.0",
                            "agent": name,
                            "token": f"jwt-{name}",
                            "session": {"modalities": ["text"]},
                        }
                    )
                    created = await recv()
                    assert created["type"] == "session.created" and created["agent"] == name
                    assert (await recv())["type"] == "capabilities"
                    sessions[name] = created["session_id"]

                # Section 3.1 in session 1; section 10.3 token refresh in session 2.
                await send(
                    {"type": "input.text", "session_id": sessions["alice"], "text": "Hi Alice"}
                )
                await send({"type": "response.create", "session_id": sessions["alice"]})
                await send(
                    {"type": "session.update", "session_id": sessions["bob"], "token": "new-jwt"}
                )
                seen: list[dict[str, Any]] = []
                while not {"response.done", "session.updated"} <= {e["type"] for e in seen}:
                    seen.append(await recv())
                updated = [e for e in seen if e["type"] == "session.updated"]
                assert updated and updated[0]["session_id"] == sessions["bob"]
                alice = [e for e in seen if e.get("session_id") == sessions["alice"]]
                assert alice[0]["type"] == "response.created"
                assert (
                    "".join(e["delta"]["text"] for e in alice if e["type"] == "response.delta")
                    == "You said: Hi Alice"
                )

                # Section 3.2: a client tool round trip in session 2.
                tool = {
                    "type": "function",
                    "function": {
                        "name": "search",
                        "parameters": {
                            "type": "object",
                            "properties": {"query": {"type": "string"}},
                            "required": ["query"],
                        },
                    },
                }
                await send(
                    {
                        "type": "session.update",
                        "session_id": sessions["bob"],
                        "session": {"modalities": ["text"], "tools": [tool]},
                    }
                )
                assert (await recv())["type"] == "session.updated"
                await send(
                    {
                        "type": "input.text",
                        "session_id": sessions["bob"],
                        "text": "search the weather",
                    }
                )
                await send({"type": "response.create", "session_id": sessions["bob"]})
                call = None
                while call is None:
                    event = await recv()
                    if event["type"] == "tool.call":
                        call = event
                await send(
                    {
                        "type": "tool.result",
                        "session_id": sessions["bob"],
                        "call_id": call["call_id"],
                        "result": '{"temperature": 22}',
                    }
                )
                done = None
                while done is None:
                    event = await recv()
                    if event["type"] == "response.done":
                        done = event
                assert done["session_id"] == sessions["bob"]
                assert done["response"]["output"][-1]["text"] == (
                    'Tool search returned: {"temperature": 22}'
                )

                # Keepalive (section 5.17) and session.end (5.3).
                await send({"type": "ping", "event_id": "ping_001"})
                assert (await recv())["type"] == "pong"
                await send(
                    {"type": "session.end", "session_id": sessions["alice"], "reason": "user_left"}
                )
                await send({"type": "input.text", "session_id": sessions["alice"], "text": "?"})
                err = await recv()
                assert err["type"] == "session.error"
                assert err["error"]["code"] == "session_ended"
            nursery.cancel_scope.cancel()
