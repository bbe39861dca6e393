"""ACP over HTTP (``POST /agents/{name}/acp``) and WebSocket (``/acp/stream``) on 127.0.0.1."""

from __future__ import annotations

import json
from typing import Any

import httpx
import trio
import trio_websocket

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.payment import TokenPolicy
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import App
from uamp_trio.demo import DemoAgent
from uamp_trio.transports.acp import mount

TIMEOUT = 10


class SlowAgent:
    name = "slow"

    def capabilities(self) -> ty.Capabilities:
        return ty.Capabilities(id="slow", provider="t", modalities=["text"], provides=["echo"])

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        if request.metadata.get("tool_call"):
            call = request.metadata["tool_call"]
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"echo {call['arguments']['x']}")))
            return
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="working")))
        await trio.sleep(30)


def make_app(policy: TokenPolicy | None = None) -> App:
    app = App([DemoAgent(), SlowAgent()])
    mount(app, payment_policy=policy)
    return app


def rpc(id: Any, method: str, params: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


async def post(server: Any, body: Any, agent: str = "demo") -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx.AsyncClient(base_url=server.url) as client:
        return await client.post(f"/agents/{agent}/acp", content=content)


async def test_http_spec_methods(serve_app: Any) -> None:
    server = await serve_app(make_app())
    with trio.fail_after(TIMEOUT):
        r = await post(server, rpc(1, "initialize", {}))
        assert r.status_code == 200
        assert r.json()["result"]["serverInfo"]["name"] == "demo"
        assert r.json()["result"]["capabilities"] == {"streaming": True, "tools": True}

        r = await post(server, rpc(2, "capabilities"))
        assert r.json()["result"]["id"] == "demo"
        assert r.json()["result"]["provider"] == "uamp-demo"

        r = await post(
            server, rpc(3, "prompt/submit", {"messages": [{"role": "user", "content": "Hello"}]})
        )
        assert r.json() == {
            "jsonrpc": "2.0",
            "id": 3,
            "result": {
                "status": "complete",
                "content": "You said: Hello",
                "usage": {"inputTokens": 1, "outputTokens": 3, "totalTokens": 4},
            },
        }

        r = await post(server, rpc(4, "tools/list"), agent="slow")
        assert r.json()["result"]["tools"][0]["name"] == "echo"
        r = await post(
            server, rpc(5, "tools/call", {"name": "echo", "arguments": {"x": "hi"}}), agent="slow"
        )
        assert r.json()["result"] == {
            "content": [{"type": "text", "text": "echo hi"}],
            "isError": False,
        }
        r = await post(server, rpc(6, "tools/call", {"name": "nope"}), agent="slow")
        assert r.json()["error"]["code"] == -32602


async def test_http_errors_and_batches(serve_app: Any) -> None:
    server = await serve_app(make_app())
    with trio.fail_after(TIMEOUT):
        r = await post(server, b"{not json")
        assert r.json()["error"]["code"] == -32700 and r.json()["id"] is None
        r = await post(server, {"jsonrpc": "2.0", "id": 1})
        assert r.json()["error"]["code"] == -32600
        r = await post(server, rpc(2, "no/such"))
        assert r.json()["error"] == {
            "code": -32601,
            "message": "Method not found: 'no/such'.",
            "data": {"method": "no/such"},
        }
        r = await post(server, rpc(3, "session/new", {"cwd": 5}))
        assert r.json()["error"]["code"] == -32602
        r = await post(server, rpc(4, "session/prompt", {"sessionId": "sess_x", "prompt": []}))
        assert r.json()["error"]["code"] == -32002
        # A notification gets no body; a batch gets an array in order.
        r = await post(
            server, {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "x"}}
        )
        assert r.status_code == 204
        r = await post(server, [rpc(5, "capabilities"), rpc(6, "nope"), 7])
        answers = r.json()
        assert [a["id"] for a in answers] == [5, 6, None]
        assert "result" in answers[0] and answers[1]["error"]["code"] == -32601
        assert answers[2]["error"]["code"] == -32600
        r = await post(server, rpc(8, "initialize", {}), agent="ghost")
        assert r.status_code == 404


async def test_http_sessions_persist_across_requests(serve_app: Any) -> None:
    server = await serve_app(make_app())
    with trio.fail_after(TIMEOUT):
        r = await post(server, rpc(1, "session/new", {"cwd": "/", "mcpServers": []}))
        sid = r.json()["result"]["sessionId"]
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "one"}]}
        r = await post(server, rpc(2, "session/prompt", prompt))
        assert r.json()["result"]["stopReason"] == "end_turn"
        # Sessions belong to their agent.
        r = await post(server, rpc(3, "session/prompt", prompt), agent="slow")
        assert r.json()["error"]["code"] == -32002


async def _ws_call(
    ws: Any, message: dict[str, Any], until_id: Any
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    await ws.send_message(json.dumps(message))
    notes = []
    while True:
        got = json.loads(await ws.get_message())
        if got.get("id") == until_id and "method" not in got:
            return notes, got
        notes.append(got)


async def test_websocket_prompt_streams_and_cancel(serve_app: Any) -> None:
    server = await serve_app(make_app())
    url = f"ws://127.0.0.1:{server.port}/agents/slow/acp/stream"
    with trio.fail_after(TIMEOUT):
        async with trio_websocket.open_websocket_url(url) as ws:
            _, init = await _ws_call(ws, rpc(1, "initialize", {"protocolVersion": 1}), 1)
            assert init["result"]["protocolVersion"] == 1
            _, new = await _ws_call(ws, rpc(2, "session/new", {"cwd": "/", "mcpServers": []}), 2)
            sid = new["result"]["sessionId"]
            await ws.send_message(
                json.dumps(
                    rpc(
                        3,
                        "session/prompt",
                        {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]},
                    )
                )
            )
            first = json.loads(await ws.get_message())
            assert first["method"] == "session/update"
            assert first["params"]["update"]["content"]["text"] == "working"
            # A second prompt on the busy session that asks for reject is
            # refused (docs/busy.md); the first goes on.
            params = {"sessionId": sid, "prompt": [], "_meta": {"uamp.on_busy": "reject"}}
            _, busy = await _ws_call(ws, rpc(4, "session/prompt", params), 4)
            assert busy["error"]["code"] == -32600
            assert busy["error"]["data"]["code"] == "conversation_busy"
            await ws.send_message(
                json.dumps(
                    {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
                )
            )
            answer = json.loads(await ws.get_message())
            assert answer == {"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "cancelled"}}
            # Garbage does not close the socket.
            await ws.send_message("{")
            assert json.loads(await ws.get_message())["error"]["code"] == -32700


async def test_websocket_prompt_submit_progress(serve_app: Any) -> None:
    server = await serve_app(make_app())
    url = f"ws://127.0.0.1:{server.port}/agents/demo/acp/stream"
    with trio.fail_after(TIMEOUT):
        async with trio_websocket.open_websocket_url(url) as ws:
            notes, final = await _ws_call(
                ws,
                rpc("p1", "prompt/submit", {"messages": [{"role": "user", "content": "Hi there"}]}),
                "p1",
            )
            assert notes[0] == {
                "jsonrpc": "2.0",
                "method": "prompt/started",
                "params": {"requestId": "p1"},
            }
            progress = [n["params"]["content"] for n in notes[1:]]
            assert all(n["method"] == "prompt/progress" for n in notes[1:])
            assert "".join(progress) == "You said: Hi there"
            assert final["result"]["status"] == "complete"
            assert final["result"]["content"] == "You said: Hi there"


async def test_websocket_payment_token_param(serve_app: Any) -> None:
    server = await serve_app(make_app(TokenPolicy({"tok"})))
    url = f"ws://127.0.0.1:{server.port}/agents/demo/acp/stream"
    with trio.fail_after(TIMEOUT):
        async with trio_websocket.open_websocket_url(url) as ws:
            _, new = await _ws_call(ws, rpc(1, "session/new", {"cwd": "/", "mcpServers": []}), 1)
            sid = new["result"]["sessionId"]
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]}
            _, refused = await _ws_call(ws, rpc(2, "session/prompt", prompt), 2)
            assert refused["error"]["code"] == -32402
            assert refused["error"]["message"] == "Payment token required"
            assert refused["error"]["data"]["accepts"][0]["scheme"] == "token"
            _, ok = await _ws_call(
                ws, rpc(3, "session/prompt", {**prompt, "payment_token": "tok"}), 3
            )
            assert ok["result"]["stopReason"] == "end_turn"
            # The session remembers the token that paid.
            _, again = await _ws_call(ws, rpc(4, "session/prompt", prompt), 4)
            assert again["result"]["stopReason"] == "end_turn"
            _, submit = await _ws_call(
                ws, rpc(5, "prompt/submit", {"messages": [{"role": "user", "content": "x"}]}), 5
            )
            assert submit["error"]["code"] == -32402


async def _sse_call(server: Any, body: dict[str, Any], agent: str = "demo") -> list[Any]:
    """POST one payload accepting server-sent events; every event's JSON, in order."""
    from uamp_proto.sse import SSEParser

    parser, out = SSEParser(), []
    async with (
        httpx.AsyncClient(base_url=server.url) as client,
        client.stream(
            "POST",
            f"/agents/{agent}/acp",
            content=json.dumps(body).encode(),
            headers={"accept": "text/event-stream"},
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for chunk in response.aiter_raw():
            out += [json.loads(e.data) for e in parser.feed(chunk)]
    return out


async def test_http_with_event_stream_delivers_what_the_websocket_does(serve_app: Any) -> None:
    """session/prompt over POST .../acp: the session/update notifications, then the answer."""
    server = await serve_app(make_app())
    with trio.fail_after(TIMEOUT):
        created = (await post(server, rpc(1, "session/new", {"cwd": "/", "mcpServers": []}))).json()
        sid = created["result"]["sessionId"]
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "over http"}]}
        events = await _sse_call(server, rpc(2, "session/prompt", prompt))
        url = f"ws://127.0.0.1:{server.port}/agents/demo/acp/stream"
        async with trio_websocket.open_websocket_url(url) as ws:
            _, new = await _ws_call(ws, rpc(1, "session/new", {"cwd": "/", "mcpServers": []}), 1)
            ws_prompt = {**prompt, "sessionId": new["result"]["sessionId"]}
            ws_notes, ws_final = await _ws_call(ws, rpc(2, "session/prompt", ws_prompt), 2)
    *notes, final = events
    assert notes, "no session/update reached the HTTP client"
    assert all(n["method"] == "session/update" and n["params"]["sessionId"] == sid for n in notes)
    chunks = [n["params"]["update"] for n in notes]
    said = "".join(
        u["content"]["text"] for u in chunks if u["sessionUpdate"] == "agent_message_chunk"
    )
    assert said == "You said: over http"
    assert (final["id"], final["result"]["stopReason"]) == (2, "end_turn")
    # The same updates, in the same order, as the WebSocket carrier delivers.
    assert [n["params"]["update"] for n in ws_notes] == chunks
    assert ws_final["result"] == final["result"]


async def test_http_with_event_stream_prompt_submit_and_plain_json_unchanged(
    serve_app: Any,
) -> None:
    server = await serve_app(make_app())
    body = rpc("p1", "prompt/submit", {"messages": [{"role": "user", "content": "Hi there"}]})
    with trio.fail_after(TIMEOUT):
        events = await _sse_call(server, body)
        plain = (await post(server, body)).json()
    assert events[0] == {
        "jsonrpc": "2.0",
        "method": "prompt/started",
        "params": {"requestId": "p1"},
    }
    assert "".join(e["params"]["content"] for e in events[1:-1]) == "You said: Hi there"
    assert events[-1]["result"]["content"] == "You said: Hi there"
    assert plain["result"] == events[-1]["result"]


# --- tools/call runs the agent's tool itself (spec 004 "ACP Transport") ---------------


def _tool_agent(calls: list[dict[str, Any]]) -> Any:
    from uamp_agents import agent, tool
    from uamp_agents.bridge import serve_agent
    from uamp_agents.providers import function

    def model(messages: Any, tools: Any) -> str:
        raise AssertionError("tools/call must not ask the model")

    def lookup(city: str) -> dict[str, Any]:
        """The weather in a city."""
        calls.append({"city": city})
        return {"city": city, "temp": 21}

    def broken(city: str) -> str:
        """Always fails."""
        raise RuntimeError(f"no station in {city}")

    def wipe(city: str) -> str:
        """Deletes a city's records; a person approves it first."""
        calls.append({"wiped": city})
        return "wiped"

    tools = [lookup, broken, tool(wipe, requires_approval=True)]
    return serve_agent(agent(name="weather", model=function(model), tools=tools))


async def test_tools_call_runs_the_named_tool_of_the_agent(serve_app: Any) -> None:
    calls: list[dict[str, Any]] = []
    app = App([_tool_agent(calls)])
    mount(app)
    server = await serve_app(app)
    with trio.fail_after(TIMEOUT):
        listed = await post(server, rpc(1, "tools/list"), agent="weather")
        names = [t["name"] for t in listed.json()["result"]["tools"]]
        assert names == ["lookup", "broken", "wipe"]
        args = {"name": "lookup", "arguments": {"city": "Oslo"}}
        r = await post(server, rpc(2, "tools/call", args), agent="weather")
        assert r.json()["result"] == {
            "content": [{"type": "text", "text": '{"city":"Oslo","temp":21}'}],
            "isError": False,
        }
        assert calls == [{"city": "Oslo"}]  # run once, with the arguments as sent
        failing = {"name": "broken", "arguments": {"city": "Oslo"}}
        r = await post(server, rpc(3, "tools/call", failing), agent="weather")
        result = r.json()["result"]
        assert result["isError"] is True and "no station in Oslo" in result["content"][0]["text"]
        bad = {"name": "lookup", "arguments": {"town": "Oslo"}}
        r = await post(server, rpc(4, "tools/call", bad), agent="weather")
        assert r.json()["result"]["isError"] is True and calls == [{"city": "Oslo"}]
        # A call a person must approve is never run by tools/call (nobody is asked).
        wipe = {"name": "wipe", "arguments": {"city": "Oslo"}}
        r = await post(server, rpc(6, "tools/call", wipe), agent="weather")
        assert r.json()["result"]["isError"] is True and "approval" in str(r.json())
        assert calls == [{"city": "Oslo"}]
        r = await post(server, rpc(5, "tools/call", {"name": "nope"}), agent="weather")
        assert r.json()["error"]["code"] == -32602 and r.json()["error"]["data"] == {"name": "nope"}
