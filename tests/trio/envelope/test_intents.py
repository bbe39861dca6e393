"""Every intent of spec 003 section 4.1 over HTTP + SSE, the length-prefixed WebSocket and gRPC.

The agents say what they were given, so each test reads the effect of an
intent in an answer: ``Recall`` answers with the intent of its exchange and
the conversation (``role:text`` joined by ``|``); ``Waiter`` waits for the
peer's first ``progress`` envelope and answers with its content.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio

from tests._support.agents import TestAgent
from tests._support.envelopes import envelope
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.envelope import EnvelopeRefused
from uamp_proto.envelope import Delta, DeltaType, Envelope, ExchangeState, encode_envelope
from uamp_proto.principal import ANONYMOUS
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app
from uamp_trio.client.envelope import EnvelopeHTTPClient, EnvelopeSigner, Reply, envelope_ws
from uamp_trio.client.envelope_bindings import envelope_grpc
from uamp_trio.envelope.keys import EnvelopeKey
from uamp_trio.envelope.service import EnvelopeLimits, EnvelopeService

TIMEOUT = 15
S = ExchangeState


class Recall(TestAgent):
    """The exchange's intent, then the conversation it was given."""

    name = "recall"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        seen = "|".join(f"{m.role}:{m.text}" for m in request.messages)
        text = f"{request.metadata['intent']} {seen}"
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text=text)))


class Waiter(TestAgent):
    """Says it waits, then answers with the content of the peer's first progress envelope."""

    name = "waiter"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        updates = request.metadata["updates"]
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="waiting ")))
        with trio.fail_after(TIMEOUT):
            while not updates:
                await trio.sleep(0.01)
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text=updates[0]["content"])))


@pytest.fixture
async def server(serve_app: Callable[..., Awaitable[Any]]) -> Any:
    return await serve_app(create_app([Recall(), Waiter()]))


@asynccontextmanager
async def http_binding(server: Any, agent: str) -> AsyncIterator[Any]:
    base = f"{server.url}/agents/{agent}"
    async with EnvelopeHTTPClient(
        base, EnvelopeSigner.ephemeral(), to=f"urn:uamp:agent:{agent}"
    ) as client:
        yield client


@asynccontextmanager
async def ws_binding(server: Any, agent: str) -> AsyncIterator[Any]:
    url = server.url.replace("http://", "ws://") + f"/agents/{agent}/uamp/1/ws"
    async with envelope_ws(url, EnvelopeSigner.ephemeral(), to=f"urn:uamp:agent:{agent}") as c:
        yield c


@asynccontextmanager
async def grpc_binding(server: Any, agent: str) -> AsyncIterator[Any]:
    to = f"urn:uamp:agent:{agent}"
    async with envelope_grpc(server.url, EnvelopeSigner.ephemeral(), to=to, agent=agent) as c:
        yield c


BINDINGS = {"http": http_binding, "ws": ws_binding, "grpc": grpc_binding}
binding = pytest.mark.parametrize("bind", sorted(BINDINGS))


async def eventually(check: Callable[[], bool]) -> None:
    with trio.fail_after(TIMEOUT):
        while not check():
            await trio.sleep(0.01)


async def while_streaming(
    client: Any,
    opening: Envelope,
    steps: Callable[[trio.MemoryReceiveChannel[Delta]], Awaitable[None]],
) -> Reply:
    """Read ``opening``'s stream while ``steps`` acts on its frames as they come."""
    send, receive = trio.open_memory_channel[Delta](1000)
    replies: list[Reply] = []

    async def read() -> None:
        replies.append(await client.exchange(opening, on_delta=send.send_nowait))

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await steps(receive)
    return replies[0]


async def next_answer(frames: trio.MemoryReceiveChannel[Delta]) -> Delta:
    """The next ``progress`` frame that closes one answer of a subscription."""
    async for frame in frames:
        if frame.type is DeltaType.PROGRESS and frame.payload and "answered" in frame.payload:
            return frame
    raise AssertionError("the stream ended without another answer")


@binding
@pytest.mark.parametrize("intent", ["inform", "notify"])
async def test_a_one_way_message_is_seen_by_the_next_ask_only(
    server: Any, bind: str, intent: str
) -> None:
    with trio.fail_after(TIMEOUT):
        async with BINDINGS[bind](server, "recall") as client:
            await client.tell(intent, "my name is Ada")
            await client.tell(intent, "I like tea")
            first = await client.ask("who am I?")
            again = await client.ask("again")
    assert first.text == "ask user:my name is Ada|user:I like tea|user:who am I?"
    assert again.text == "ask user:again"  # the notes were taken by the first ask


@binding
async def test_an_inform_about_an_exchange_joins_its_conversation(server: Any, bind: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with BINDINGS[bind](server, "recall") as client:
            first = await client.ask("remember this")
            await client.tell("inform", "an extra fact", reply_to=first.envelope)
            second = await client.ask("and now?", context=[first.context()])
    assert second.text == (
        "ask user:remember this|assistant:ask user:remember this|user:an extra fact|user:and now?"
    )


@binding
@pytest.mark.parametrize(("decision", "end"), [("confirm", S.COMPLETED), ("deny", S.CANCELLED)])
async def test_a_proposal_is_answered_then_confirmed_or_denied(
    server: Any, bind: str, decision: str, end: ExchangeState
) -> None:
    service = server.app.envelopes
    with trio.fail_after(TIMEOUT):
        async with BINDINGS[bind](server, "recall") as client:
            reply = await client.ask("plan: meet at three", intent="propose")
            exchange = service.find(reply.envelope.id, ANONYMOUS)
            assert exchange.state is S.ANSWERED
            await client.reply(decision, reply.envelope)
            await eventually(lambda: exchange.state is end)
    assert reply.text == "propose user:plan: meet at three"
    assert reply.final is not None and reply.final.type is DeltaType.DONE


@binding
async def test_a_subscription_answers_each_notify_on_its_stream_until_confirmed(
    server: Any, bind: str
) -> None:
    service = server.app.envelopes
    async with BINDINGS[bind](server, "recall") as client:
        sub = client.signer.make("subscribe", "watch the door", to=client.to)
        answers: list[Delta] = []
        notes: list[Envelope] = []

        async def steps(frames: trio.MemoryReceiveChannel[Delta]) -> None:
            answers.append(await next_answer(frames))
            notes.append(await client.tell("notify", "someone knocked", reply_to=sub))
            answers.append(await next_answer(frames))
            assert service.find(sub.id, ANONYMOUS).state is S.IN_PROGRESS
            await client.reply("confirm", sub)

        reply = await while_streaming(client, sub, steps)
    assert [a.payload["answered"] for a in answers] == [sub.id, notes[0].id]
    assert answers[0].payload["text"] == "subscribe user:watch the door"
    assert answers[1].payload["text"] == (
        "subscribe user:watch the door|assistant:subscribe user:watch the door|user:someone knocked"
    )
    assert reply.final is not None and reply.final.type is DeltaType.DONE
    assert [d.delta_seq for d in reply.deltas] == list(range(len(reply.deltas)))
    assert {d.stream_id for d in reply.deltas} == {sub.id}
    assert service.find(sub.id, ANONYMOUS).state is S.COMPLETED


@binding
async def test_cancel_ends_a_subscription_between_events(server: Any, bind: str) -> None:
    service = server.app.envelopes
    async with BINDINGS[bind](server, "recall") as client:
        sub = client.signer.make("subscribe", "watch", to=client.to)

        async def steps(frames: trio.MemoryReceiveChannel[Delta]) -> None:
            await next_answer(frames)
            await client.reply("cancel", sub)

        reply = await while_streaming(client, sub, steps)
    assert reply.final is not None and reply.final.type is DeltaType.CANCEL
    assert service.find(sub.id, ANONYMOUS).state is S.CANCELLED


@binding
async def test_a_progress_envelope_reaches_the_running_agent(server: Any, bind: str) -> None:
    async with BINDINGS[bind](server, "waiter") as client:
        ask = client.signer.make("ask", "go", to=client.to)

        async def steps(frames: trio.MemoryReceiveChannel[Delta]) -> None:
            first = await frames.receive()
            assert first.payload == {"text": "waiting "}
            ack = {"delta_seq": first.delta_seq}  # a progress envelope acknowledges too
            await client.tell("progress", "the code is 42", reply_to=ask, ext=ack)

        reply = await while_streaming(client, ask, steps)
    assert reply.text == "waiting the code is 42"
    assert server.app.envelopes.find(ask.id, ANONYMOUS).updates[0]["content"] == "the code is 42"


async def test_over_http_a_one_way_message_is_202_without_a_stream(server: Any) -> None:
    async with httpx.AsyncClient(base_url=server.url) as http:
        sent = envelope("inform", "fyi", to="urn:uamp:agent:recall")
        r = await http.post(
            "/agents/recall/v1/messages",
            content=encode_envelope(sent),
            headers={"content-type": "application/uamp+json;v=1"},
        )
        lost = envelope("progress", "about nothing", to="urn:uamp:agent:recall")
        refused = await http.post(
            "/agents/recall/v1/messages",
            content=encode_envelope(lost),
            headers={"content-type": "application/uamp+json;v=1"},
        )
    assert r.status_code == 202 and "location" not in r.headers
    assert r.json() == {"id": sent.id, "state": "completed"}
    assert refused.status_code == 400  # a progress envelope names its exchange


# --- the service alone: bounds and endings -------------------------------------------------


def _service(**limits: Any) -> EnvelopeService:
    app = create_app([Recall()], transports=[])
    return EnvelopeService(app, EnvelopeKey.ephemeral_key(), limits=EnvelopeLimits(**limits))


async def _frames(exchange: Any) -> list[Delta]:
    return [d async for d in exchange.deltas()]


async def test_a_quiet_subscription_ends_done_after_the_idle_timeout() -> None:
    service = _service(idle_timeout=0.2)
    async with trio.open_nursery() as nursery:
        sub = envelope("subscribe", "watch", to="urn:uamp:agent:recall", window=100)
        done = await service.submit(service.resolve(None, sub), sub, nursery=nursery)
        with trio.fail_after(TIMEOUT):
            frames = await _frames(done.exchange)
    assert frames[-1].type is DeltaType.DONE
    assert frames[-1].payload == {"state": "completed"}
    assert done.exchange is not None and done.exchange.state is S.COMPLETED
    assert service.running("recall") == 0


async def test_a_subscription_refuses_events_past_its_queue_with_5_04() -> None:
    service = _service(retry_after=3)
    async with trio.open_nursery() as nursery:
        sub = envelope("subscribe", "watch", to="urn:uamp:agent:recall", window=1)
        agent = service.resolve(None, sub)
        opened = await service.submit(agent, sub, nursery=nursery)
        await trio.sleep(0.05)  # the first answer runs, and stalls on its window
        refused = None
        for i in range(20):  # a window of 1 never acknowledged: the agent stalls
            note = envelope("notify", f"event {i}", to="urn:uamp:agent:recall", reply_to=sub.id)
            try:
                await service.submit(agent, note, nursery=nursery)
            except EnvelopeRefused as exc:
                refused = (i, exc)
                break
        assert opened.exchange is not None
        opened.exchange.stop()
        nursery.cancel_scope.cancel()
    assert refused is not None
    index, exc = refused
    assert exc.code == "5.04" and exc.retry_after == 3
    assert index == 8  # the queue holds 8 events


async def test_notify_to_a_finished_subscription_only_joins_its_conversation() -> None:
    service = _service()
    async with trio.open_nursery() as nursery:
        sub = envelope("subscribe", "watch", to="urn:uamp:agent:recall")
        agent = service.resolve(None, sub)
        opened = await service.submit(agent, sub, nursery=nursery)
        exchange = opened.exchange
        assert exchange is not None
        await service.submit(
            agent,
            envelope("cancel", to="urn:uamp:agent:recall", reply_to=sub.id),
            nursery=nursery,
        )
        frames = await _frames(exchange)
        late = envelope("notify", "too late", to="urn:uamp:agent:recall", reply_to=sub.id)
        await service.submit(agent, late, nursery=nursery)
    assert frames[-1].type is DeltaType.CANCEL
    assert exchange.messages[-1].text == "too late"
    assert [d.delta_seq for d in await _frames(exchange)] == [d.delta_seq for d in frames]


async def test_one_way_messages_about_an_unknown_exchange_are_4_04() -> None:
    service = _service()
    for intent in ("inform", "notify", "progress"):
        env = envelope(intent, "x", to="urn:uamp:agent:recall", reply_to=envelope().id)
        with pytest.raises(EnvelopeRefused) as info:
            await service.submit(service.resolve(None, env), env)
        assert info.value.code == "4.04"


async def test_notes_are_bounded_per_caller() -> None:
    service = _service()
    agent = service.resolve("recall")
    refused: list[str] = []
    for i in range(40):
        try:
            await service.submit(agent, envelope("inform", f"n{i}", to="urn:uamp:agent:recall"))
        except EnvelopeRefused as exc:
            refused.append(exc.code)
    async with trio.open_nursery() as nursery:
        ask = envelope("ask", "q", to="urn:uamp:agent:recall")
        opened = await service.submit(agent, ask, nursery=nursery)
    assert opened.exchange is not None
    texts = [m.text for m in opened.exchange.messages if m.role == "user"]
    # The first 32 wait; the sender is told (5.04) of the 8 that did not fit.
    assert texts == [f"n{i}" for i in range(32)] + ["q"]
    assert refused == ["5.04"] * 8
