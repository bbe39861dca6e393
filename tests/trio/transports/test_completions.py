"""The Chat Completions endpoints: routing by agent, errors, streaming, failures."""

from __future__ import annotations

import json
from typing import Any

import httpx
import trio

from tests._support.agents import TestAgent
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, ResponderError, TurnRequest
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent

TIMEOUT = 10


class FailingAgent(TestAgent):
    """Emits one delta, then fails as configured."""

    def __init__(self, name: str, error: Exception) -> None:
        self.name = name
        self.error = error

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="partial")))
        raise self.error


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def sse_chunks(body: str) -> list[Any]:
    frames = [f[len("data: ") :] for f in body.split("\n\n") if f.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    return [json.loads(f) for f in frames[:-1]]


async def test_single_agent_answers_at_root_and_under_its_name(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        server = await serve_app(create_app([DemoAgent()]))
        async with httpx.AsyncClient(base_url=server.url) as client:
            for path in (
                "/chat/completions",
                "/v1/chat/completions",
                "/agents/demo/chat/completions",
                "/agents/demo/v1/chat/completions",
            ):
                r = await client.post(path, json=user("ping"))
                assert r.status_code == 200, path
                assert r.json()["choices"][0]["message"]["content"] == "You said: ping"
            caps = (await client.get("/capabilities")).json()
            assert caps["id"] == "demo" and caps["modalities"] == ["text"]
            assert (await client.get("/agents/demo/capabilities")).json() == caps
            models = (await client.get("/v1/models")).json()
            assert models["object"] == "list"
            assert [m["id"] for m in models["data"]] == ["demo"]


async def test_multi_agent_routing_with_dotted_names(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        app = create_app([DemoAgent("alice.my-bot.helper"), DemoAgent("bob")])
        server = await serve_app(app)
        async with httpx.AsyncClient(base_url=server.url) as client:
            r = await client.post(
                "/agents/alice.my-bot.helper/chat/completions",
                json={**user("hi"), "model": "whatever"},
            )
            assert r.status_code == 200 and r.json()["model"] == "whatever"
            r = await client.get("/agents/alice.my-bot.helper/v1/models")
            assert [m["id"] for m in r.json()["data"]] == ["alice.my-bot.helper"]
            r = await client.get("/v1/models")
            assert sorted(m["id"] for m in r.json()["data"]) == ["alice.my-bot.helper", "bob"]
            # Root paths are ambiguous with two agents, unless `model` names one.
            r = await client.post("/v1/chat/completions", json=user("hi"))
            assert r.status_code == 404 and r.json()["error"]["code"] == "agent_not_found"
            r = await client.post("/v1/chat/completions", json={**user("hi"), "model": "bob"})
            assert r.status_code == 200 and r.json()["model"] == "bob"
            r = await client.post("/agents/carol/chat/completions", json=user("hi"))
            assert r.status_code == 404
            assert "carol" in r.json()["error"]["message"]
            r = await client.get("/agents/carol/capabilities")
            assert r.status_code == 404


async def test_bad_requests_get_openai_errors(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        server = await serve_app(create_app([DemoAgent()]))
        url = "/agents/demo/chat/completions"
        async with httpx.AsyncClient(base_url=server.url) as client:
            r = await client.post(url, content=b"[1, 2")
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
            r = await client.post(url, json={"messages": "hi"})
            assert r.status_code == 400
            assert r.json()["error"]["param"] == "messages"
            r = await client.post(url, json={**user("x"), "n": 3})
            assert r.status_code == 400
            assert r.json()["error"] == {
                "message": "Only n=1 is supported, got n=3.",
                "type": "invalid_request_error",
                "param": "n",
                "code": "unsupported_value",
            }
            for role in ({}, [], 5):  # once a 500: an unhashable role in the plain shortcut
                r = await client.post(url, json={"messages": [{"role": role, "content": "x"}]})
                assert r.status_code == 400
                assert r.json()["error"]["param"] == "messages[0].role"
            r = await client.get(url)
            assert r.status_code == 405 and r.headers["allow"] == "POST"
            r = await client.post("/agents/demo/capabilities")
            assert r.status_code == 405


async def test_agent_failures_are_reported_and_the_server_survives(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        app = create_app(
            [
                FailingAgent("crash", RuntimeError("bug")),
                FailingAgent("limited", ResponderError("rate_limited", "slow down")),
                DemoAgent(),
            ]
        )
        server = await serve_app(app)
        async with httpx.AsyncClient(base_url=server.url) as client:
            r = await client.post("/agents/crash/chat/completions", json=user("x"))
            assert r.status_code == 500
            assert r.json()["error"]["code"] == "internal_error"
            assert r.json()["error"]["type"] == "server_error"
            r = await client.post("/agents/limited/chat/completions", json=user("x"))
            assert r.status_code == 429
            assert r.json()["error"]["message"] == "slow down"
            r = await client.post(
                "/agents/limited/chat/completions", json={**user("x"), "stream": True}
            )
            assert r.status_code == 200  # already streaming when the agent failed
            frames = sse_chunks(r.text)
            assert frames[1]["choices"][0]["delta"]["content"] == "partial"
            assert frames[-1]["error"]["code"] == "rate_limited"
            r = await client.post("/agents/demo/chat/completions", json=user("still here"))
            assert r.json()["choices"][0]["message"]["content"] == "You said: still here"


async def test_streaming_chunks_and_usage(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        server = await serve_app(create_app([DemoAgent()]))
        async with httpx.AsyncClient(base_url=server.url) as client:
            body = {**user("a b c d"), "stream": True, "stream_options": {"include_usage": True}}
            r = await client.post("/chat/completions", json=body)
            assert r.headers["content-type"].startswith("text/event-stream")
            chunks = sse_chunks(r.text)
            ids = {c["id"] for c in chunks}
            assert len(ids) == 1 and next(iter(ids)).startswith("chatcmpl-")
            assert all(c["object"] == "chat.completion.chunk" for c in chunks)
            assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
            text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
            assert text == "You said: a b c d"
            assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
            assert chunks[-1]["choices"] == []
            assert chunks[-1]["usage"] == {
                "prompt_tokens": 4,
                "completion_tokens": 6,
                "total_tokens": 10,
            }
            # max_tokens cuts the demo reply and reports "length".
            r = await client.post("/chat/completions", json={**user("a b c d"), "max_tokens": 2})
            choice = r.json()["choices"][0]
            assert choice["message"]["content"] == "You said:"
            assert choice["finish_reason"] == "length"


class EndlessAgent(TestAgent):
    """Streams text until cancelled; records that it was stopped."""

    name = "endless"

    def __init__(self) -> None:
        self.stopped = trio.Event()
        self.emitted = 0

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        try:
            while True:
                await emit(ev.ResponseDelta(delta=ty.DeltaText(text="more ")))
                self.emitted += 1
                await trio.sleep(0.001)
        finally:
            self.stopped.set()


async def test_a_client_that_leaves_mid_stream_stops_the_agent(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        agent = EndlessAgent()
        server = await serve_app(create_app([agent, DemoAgent()]))
        async with httpx.AsyncClient(base_url=server.url) as client:
            body = {**user("go"), "stream": True}
            async with client.stream("POST", "/agents/endless/chat/completions", json=body) as r:
                assert r.status_code == 200
                seen = ""
                async for text in r.aiter_text():
                    seen += text
                    if seen.count('"content":"more "') >= 3:
                        break
            await agent.stopped.wait()
            r = await client.post("/agents/demo/chat/completions", json=user("after"))
            assert r.json()["choices"][0]["message"]["content"] == "You said: after"


async def test_many_quick_deltas_arrive_whole_and_in_order(serve_app) -> None:  # type: ignore[no-untyped-def]
    class Counter:
        name = "counter"

        def capabilities(self) -> ty.Capabilities:
            return ty.Capabilities(id="counter", provider="test", modalities=["text"])

        async def respond(self, request: TurnRequest, emit: Emit) -> None:
            for i in range(500):  # never waits: the writer batches them
                await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"{i} ")))

    with trio.fail_after(TIMEOUT):
        server = await serve_app(create_app([Counter()]))
        for http2 in (False, True):  # HTTP/2 in cleartext with prior knowledge
            async with httpx.AsyncClient(
                base_url=server.url, http1=not http2, http2=http2
            ) as client:
                r = await client.post("/chat/completions", json={**user("n"), "stream": True})
                assert r.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
                chunks = sse_chunks(r.text)
                text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
                assert text == "".join(f"{i} " for i in range(500)), http2
