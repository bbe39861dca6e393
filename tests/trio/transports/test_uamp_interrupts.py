"""Interrupts over UAMP WebSocket and HTTP+SSE with the real client (docs/human-in-the-loop.md)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
import trio

from uamp_agents import agent
from uamp_agents.bridge import demo_agent, serve_agent
from uamp_proto import events as ev
from uamp_trio import Server, create_app
from uamp_trio.client import connect, connect_sse

TIMEOUT = 20


def approving_demo(**kw: Any) -> Any:
    base = demo_agent()
    return serve_agent(
        agent(model=base.model, tools=base.tools, system=base.system, name="demo", approve={"add"})
    )


@asynccontextmanager
async def serving(app_hook: Callable[[Any], None] | None = None) -> AsyncIterator[str]:
    app = create_app([approving_demo()])
    if app_hook is not None:
        app_hook(app)
    server = Server(app, port=0, shutdown_grace=0.5)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield f"127.0.0.1:{server.port}"
        nursery.cancel_scope.cancel()


def ws_client(addr: str, **kw: Any) -> AbstractAsyncContextManager[Any]:
    return connect(f"ws://{addr}/ws", **kw)


def sse_client(addr: str, **kw: Any) -> AbstractAsyncContextManager[Any]:
    return connect_sse(f"http://{addr}", **kw)


Opener = Callable[..., AbstractAsyncContextManager[Any]]
CLIENTS = [ws_client, sse_client]
IDS = ["ws", "sse"]


async def _paused(session: Any) -> tuple[Any, ev.InterruptRequest, list[ev.Event]]:
    """Start "what is 2+3?" and read the stream up to its interrupt."""
    stream = session.respond("what is 2+3?")
    seen: list[ev.Event] = []
    async for event in stream:
        seen.append(event)
        if isinstance(event, ev.InterruptRequest):
            return stream, event, seen
    raise AssertionError(f"no interrupt: {[e.type for e in seen]}")


async def _rest(stream: Any) -> tuple[list[ev.Event], str]:
    events = [event async for event in stream]
    done = events[-1]
    assert isinstance(done, ev.ResponseDone), [e.type for e in events]
    text = "".join(i.text for i in done.response.output if getattr(i, "type", "") == "text")
    return events, text


CASES = [
    # (answer kwargs, outcome, expected text)
    ({"approved": True}, "approved", "2 + 3 = 5"),
    ({"approved": False, "reason": "not now"}, "denied", "denied"),
    ({"approved": True, "arguments": {"a": 2, "b": 40}}, "approved", "2 + 3 = 42"),
]


@pytest.mark.parametrize("open_client", CLIENTS, ids=IDS)
@pytest.mark.parametrize(("answer", "outcome", "text"), CASES, ids=["approve", "deny", "edit"])
async def test_an_approval_pauses_the_run_until_answered_from_another_connection(
    open_client: Opener, answer: dict[str, Any], outcome: str, text: str
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving() as addr, open_client(addr) as first, open_client(addr) as second:
            session = await first.create_session("demo", interrupts=True)
            assert "interrupts" in (session.capabilities.extensions or {})
            stream, asked, _ = await _paused(session)
            assert asked.kind == "approval" and asked.tool_name == "add"
            assert asked.arguments == {"a": 2, "b": 3}
            assert asked.interrupt_id in session.interrupts
            other = await second.create_session("demo")
            await other.answer(asked.interrupt_id, **answer)
            events, reply = await _rest(stream)
            resolved = [e for e in events if isinstance(e, ev.InterruptResolved)]
            assert [(r.interrupt_id, r.outcome) for r in resolved] == [
                (asked.interrupt_id, outcome)
            ]
            assert text in reply
            assert asked.interrupt_id not in session.interrupts


@pytest.mark.parametrize("open_client", CLIENTS, ids=IDS)
async def test_an_unknown_interrupt_id_is_refused_and_the_run_stays_paused(
    open_client: Opener,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving() as addr, open_client(addr) as client:
            session = await client.create_session("demo", interrupts=True)
            stream, asked, _ = await _paused(session)
            other = await client.create_session("demo")
            await other.answer("no-such-interrupt", approved=True)
            while not other.errors:
                await trio.sleep(0.01)
            assert other.errors[0].error.code == "interrupt_not_found"
            await other.answer(asked.interrupt_id, approved=True)
            _, reply = await _rest(stream)
            assert "= 5" in reply


@pytest.mark.parametrize("open_client", CLIENTS, ids=IDS)
async def test_a_client_that_does_not_declare_interrupts_gets_the_deny_policy(
    open_client: Opener,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving() as addr, open_client(addr) as client:
            session = await client.create_session("demo")
            events, reply = await _rest(session.respond("what is 2+3?"))
            assert not [e for e in events if isinstance(e, ev.InterruptRequest)]
            assert "could not add" in reply and "denied" in reply


@pytest.mark.parametrize("open_client", CLIENTS, ids=IDS)
async def test_on_interrupt_answers_in_the_client(open_client: Opener) -> None:
    from uamp_proto.interrupts import Answer

    asked: list[str] = []

    def approve(request: ev.InterruptRequest) -> Answer:
        asked.append(request.tool_name or "")
        return Answer(approved=True)

    with trio.fail_after(TIMEOUT):
        async with serving() as addr, open_client(addr) as client:
            session = await client.create_session("demo", on_interrupt=approve)
            _, reply = await _rest(session.respond("what is 2+3?"))
            assert asked == ["add"] and "= 5" in reply


async def test_an_answer_given_on_another_process_reaches_the_paused_run(redis_url: str) -> None:
    """Two servers on one Redis: the run waits on the first, the person answers on the second."""
    from contextlib import AsyncExitStack

    from uamp_trio.stores.interrupts_redis import RedisInterruptRelay

    prefix = f"t{uuid.uuid4().hex[:8]}"
    with trio.fail_after(TIMEOUT):
        async with AsyncExitStack() as stack:
            addrs = []
            for _ in range(2):
                relay = RedisInterruptRelay(redis_url, prefix=prefix)
                stack.push_async_callback(relay.aclose)

                def share(app: Any, relay: RedisInterruptRelay = relay) -> None:
                    app.interrupts.relay = relay

                addrs.append(await stack.enter_async_context(serving(share)))
            first = await stack.enter_async_context(ws_client(addrs[0]))
            second = await stack.enter_async_context(ws_client(addrs[1]))
            session = await first.create_session("demo", interrupts=True)
            stream, asked, _ = await _paused(session)
            elsewhere = await second.create_session("demo")
            await elsewhere.answer("no-such-interrupt", approved=True)
            await elsewhere.answer(asked.interrupt_id, approved=False, reason="from B")
            events, reply = await _rest(stream)
            assert "denied" in reply and "from B" in reply
            assert [e.outcome for e in events if isinstance(e, ev.InterruptResolved)] == ["denied"]
            while not elsewhere.errors:
                await trio.sleep(0.01)
            assert [e.error.code for e in elsewhere.errors] == ["interrupt_not_found"]
            # Answered and forgotten: the id reads like any unknown one now, everywhere.
            await elsewhere.answer(asked.interrupt_id, approved=True)
            while len(elsewhere.errors) < 2:
                await trio.sleep(0.01)
            assert elsewhere.errors[1].error.code == "interrupt_not_found"


@pytest.mark.parametrize("open_client", CLIENTS, ids=IDS)
async def test_a_flood_of_answers_is_answered_one_by_one_and_the_session_goes_on(
    open_client: Opener,
) -> None:
    """Abuse: answers to made-up ids as fast as the client can send them. Each gets
    one refusal (unknown id, or rate_limited past 16 at once); nothing else breaks."""
    flood = 50
    with trio.fail_after(TIMEOUT):
        async with serving() as addr, open_client(addr) as client:
            session = await client.create_session("demo", interrupts=True)
            for n in range(flood):
                await session.answer(f"made-up-{n}", approved=True)
            while len(session.errors) < flood:
                await trio.sleep(0.01)
            codes = {e.error.code for e in session.errors}
            assert codes <= {"interrupt_not_found", "rate_limited"}, codes
            stream, asked, _ = await _paused(session)
            await session.answer(asked.interrupt_id, approved=True)
            _, reply = await _rest(stream)
            assert "2 + 3 = 5" in reply
