"""The busy policy on Realtime, with the openai SDK's realtime client.

A ``response.create`` while a response is active: before the policy it was
always the error ``conversation_already_has_active_response`` (OpenAI's own
answer, kept for ``reject``). ``enqueue`` starts it once the active one is
done; ``interrupt`` cancels the active one (``response.done`` status
``cancelled``, its partial item stays); ``rollback`` also deletes that item
(``conversation.item.deleted``). ``response.metadata["uamp.on_busy"]``
overrides the server's policy. Every test runs against ``uamp serve`` and the
ASGI app (``uamp_asgi`` under uvicorn, ``Config.on_busy``): one connection
core serves both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from types import SimpleNamespace
from typing import Any

import openai
import pytest

from tests._support.busy import Holder, until_async
from uamp_trio.app import create_app

TIMEOUT = 30


@pytest.fixture(params=["uamp serve", "uamp_asgi"])
def serve(request: pytest.FixtureRequest, thread_server: Any) -> Iterator[Callable[..., Any]]:
    """``server, agent = serve(on_busy=...)``: a Holder's Realtime endpoint on either server."""
    with ExitStack() as stack:

        def start(**config: Any) -> tuple[Any, Holder]:
            agent = Holder()
            if request.param == "uamp serve":
                return thread_server(create_app([agent]), **config), agent
            import uamp_asgi
            from tests._support.asgi import uvicorn_server

            app = uamp_asgi.app(
                [agent], config=uamp_asgi.Config(transports=("realtime",), **config)
            )
            return SimpleNamespace(url=stack.enter_context(uvicorn_server(app))), agent

        yield start


async def _say(conn: Any, text: str) -> None:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    await conn.conversation.item.create(item=item)


async def _events(conn: Any, count: int) -> list[Any]:
    """Every event up to the ``count`` th ``response.done``."""
    seen = []
    async for event in conn:
        seen.append(event)
        if sum(e.type == "response.done" for e in seen) == count:
            return seen
    raise AssertionError("the connection closed")


def _run(server: Any, body: Any) -> None:
    async def main() -> None:
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url=f"{server.url}/agents/holder", max_retries=0
        )
        async with client.realtime.connect(model="gpt-realtime") as conn:
            assert (await conn.recv()).type == "session.created"
            await body(conn)

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


@pytest.mark.parametrize("how", ["server", "metadata"])
def test_enqueue_starts_the_second_response_when_the_first_is_done(
    serve: Callable[..., Any], how: str
) -> None:
    server, agent = serve(on_busy="reject" if how == "metadata" else "enqueue")
    response = {"metadata": {"uamp.on_busy": "enqueue"}} if how == "metadata" else None

    async def body(conn: Any) -> None:
        await _say(conn, "hold one")
        await conn.response.create()
        await until_async(lambda: agent.started == ["hold one"])
        await _say(conn, "two")
        await conn.response.create(response=response) if response else await conn.response.create()
        await asyncio.sleep(0.3)
        assert agent.started == ["hold one"]
        agent.release.set()
        seen = await _events(conn, 2)
        done = [e for e in seen if e.type == "response.done"]
        assert [d.response.status for d in done] == ["completed", "completed"]
        assert not [e for e in seen if e.type == "error"]

    _run(server, body)
    assert agent.started == ["hold one", "two"]
    assert "assistant:echo hold one" in agent.seen["two"]


def test_reject_is_the_realtime_error(serve: Callable[..., Any]) -> None:
    server, agent = serve(on_busy="reject")

    async def body(conn: Any) -> None:
        await _say(conn, "hold one")
        await conn.response.create()
        await until_async(lambda: agent.started == ["hold one"])
        await conn.response.create()
        async for event in conn:
            if event.type == "error":
                assert event.error.code == "conversation_already_has_active_response"
                break
        agent.release.set()
        seen = await _events(conn, 1)
        assert seen[-1].response.status == "completed"

    _run(server, body)
    assert agent.started == ["hold one"]


@pytest.mark.parametrize(("policy", "kept"), [("interrupt", True), ("rollback", False)])
def test_interrupt_keeps_and_rollback_deletes_the_cancelled_item(
    serve: Callable[..., Any], policy: str, kept: bool
) -> None:
    server, agent = serve(on_busy=policy)

    async def body(conn: Any) -> None:
        await _say(conn, "hold one")
        await conn.response.create()
        await until_async(lambda: agent.started == ["hold one"])
        await _say(conn, "two")
        await conn.response.create()
        seen = await _events(conn, 2)
        done = [e for e in seen if e.type == "response.done"]
        assert [d.response.status for d in done] == ["cancelled", "completed"]
        deleted = [e for e in seen if e.type == "conversation.item.deleted"]
        assert bool(deleted) is not kept

    _run(server, body)
    assert agent.cancelled == ["hold one"]
    assert ("assistant:echo hold one" in agent.seen["two"]) is kept


def test_a_policy_that_names_none_is_invalid_value_and_the_session_goes_on(
    serve: Callable[..., Any],
) -> None:
    server, agent = serve()

    async def body(conn: Any) -> None:
        await _say(conn, "hold one")
        await conn.response.create()
        await until_async(lambda: agent.started == ["hold one"])
        await conn.response.create(response={"metadata": {"uamp.on_busy": "sometimes"}})
        async for event in conn:
            if event.type == "error":
                assert event.error.code == "invalid_value"
                assert "sometimes" in event.error.message
                break
        agent.release.set()
        seen = await _events(conn, 1)
        assert seen[-1].response.status == "completed"
        await _say(conn, "after")
        await conn.response.create()
        again = await _events(conn, 1)
        assert again[-1].response.status == "completed"

    _run(server, body)
    assert agent.started == ["hold one", "after"]


def test_an_asgi_config_naming_no_policy_is_refused() -> None:
    import uamp_asgi

    with pytest.raises(ValueError, match="on_busy"):
        uamp_asgi.Config(on_busy="sometimes")
