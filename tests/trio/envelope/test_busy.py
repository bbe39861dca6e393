"""The busy policy on spec 003 envelopes, with the repo's envelope client over HTTP + SSE.

A conversation is a chain of exchanges (an ``ask`` whose ``context`` names an
earlier one continues it) and a subscription's events. A message for a
conversation whose turn still runs: ``reject`` is 5.04 (Backend busy, with
``retry_after``), ``enqueue`` runs it after that turn, on the conversation
it left, ``interrupt`` stops that turn (an ask ends with its ``cancel``
frame; a subscription's turn with a ``progress`` frame naming
``"uamp.on_busy"``, and the subscription goes on), what it said staying in
the conversation, ``rollback`` stops it and drops its turn. The policy is
the server's (``on_busy``) or the envelope's ``ext["uamp.on_busy"]``.
Before the policy, an ``ask`` continuing a running exchange was not held
(its context was ignored) and a subscription's events always queued.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from tests._support.busy import Holder
from uamp_proto.envelope import ContextRef, Delta, DeltaType, Envelope, envelope_sha256
from uamp_trio.app import create_app
from uamp_trio.client.envelope import EnvelopeClientError, EnvelopeHTTPClient, EnvelopeSigner, Reply

TIMEOUT = 15
HELD = ["user:hold one", "assistant:echo hold one"]

#: policy -> (the first turn stopped, what the second message saw of it)
CASES: dict[str, tuple[bool, list[str] | None]] = {
    "reject": (False, None),
    "enqueue": (False, HELD),
    "interrupt": (True, HELD),
    "rollback": (True, []),
}
HOW = pytest.mark.parametrize("how", ["server", "ext"])
POLICY = pytest.mark.parametrize("policy", list(CASES))


@asynccontextmanager
async def _client(
    serve_app: Callable[..., Awaitable[Any]], policy: str, how: str
) -> AsyncIterator[tuple[EnvelopeHTTPClient, Holder, dict[str, Any] | None]]:
    default = policy if how == "server" else ("reject" if policy == "enqueue" else "enqueue")
    agent = Holder()
    server = await serve_app(create_app([agent]), on_busy=default)
    ext = {"uamp.on_busy": policy} if how == "ext" else None
    base = f"{server.url}/agents/holder"
    async with EnvelopeHTTPClient(
        base, EnvelopeSigner.ephemeral(), to="urn:uamp:agent:holder"
    ) as client:
        yield client, agent, ext


async def _until(check: Callable[[], bool]) -> None:
    while not check():
        await trio.sleep(0.01)


def _ref(envelope: Envelope) -> ContextRef:
    return ContextRef(id=envelope.id, hash="sha256:" + envelope_sha256(envelope))


@POLICY
@HOW
async def test_an_ask_continuing_a_running_exchange(
    serve_app: Callable[..., Awaitable[Any]], policy: str, how: str
) -> None:
    stopped, saw = CASES[policy]
    replies: dict[str, Reply] = {}
    async with _client(serve_app, policy, how) as (client, agent, ext):
        first = client.signer.make("ask", "hold one", to=client.to)
        second = client.signer.make("ask", "two", to=client.to, context=[_ref(first)], ext=ext)

        async def run(name: str, envelope: Envelope) -> None:
            replies[name] = await client.exchange(envelope)

        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run, "first", first)
                await _until(lambda: agent.started == ["hold one"])
                if policy == "reject":
                    with pytest.raises(EnvelopeClientError) as refused:
                        await client.exchange(second)
                    assert refused.value.code == "5.04" and refused.value.status == 503
                    assert refused.value.retry_after is not None
                elif policy == "enqueue":
                    nursery.start_soon(run, "second", second)
                    # Another conversation is never held: answered while "two" waits.
                    other = await client.ask("elsewhere")
                    assert other.text == "echo elsewhere"
                    assert agent.started == ["hold one", "elsewhere"]
                else:
                    await run("second", second)
                agent.release.set()
    old = replies["first"]
    assert old.text == "echo hold one"
    assert old.final is not None
    assert old.final.type is (DeltaType.CANCEL if stopped else DeltaType.DONE)
    assert agent.cancelled == (["hold one"] if stopped else [])
    if saw is None:
        assert "two" not in agent.started
        return
    new = replies["second"]
    assert new.text == "echo two" and new.final is not None
    assert new.final.type is DeltaType.DONE
    assert agent.seen["two"] == [*saw, "user:two"]


def _answers(frames: list[Delta]) -> list[dict[str, Any]]:
    return [
        dict(f.payload) for f in frames if f.type is DeltaType.PROGRESS and "answered" in f.payload
    ]


@POLICY
@HOW
async def test_a_notify_while_the_subscriptions_turn_runs(
    serve_app: Callable[..., Awaitable[Any]], policy: str, how: str
) -> None:
    stopped, saw = CASES[policy]
    frames: list[Delta] = []
    async with _client(serve_app, policy, how) as (client, agent, ext):
        sub = client.signer.make("subscribe", "hold one", to=client.to)
        replies: list[Reply] = []

        async def read() -> None:
            replies.append(await client.exchange(sub, on_delta=frames.append))

        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                await _until(lambda: agent.started == ["hold one"])
                if policy == "reject":
                    with pytest.raises(EnvelopeClientError) as refused:
                        await client.tell("notify", "two", reply_to=sub, ext=ext)
                    assert refused.value.code == "5.04"
                    agent.release.set()
                    await _until(lambda: len(_answers(frames)) == 1)
                else:
                    note = await client.tell("notify", "two", reply_to=sub, ext=ext)
                    if policy == "enqueue":
                        agent.release.set()
                    await _until(lambda: len(_answers(frames)) == 2)
                    assert _answers(frames)[1]["answered"] == note.id
                await client.reply("confirm", sub)
    [reply] = replies
    assert reply.final is not None and reply.final.type is DeltaType.DONE
    first = _answers(frames)[0]
    assert first["answered"] == sub.id
    assert first.get("uamp.on_busy") == (policy if stopped else None)
    assert agent.cancelled == (["hold one"] if stopped else [])
    if saw is not None:
        assert agent.seen["two"] == [*saw, "user:two"]
    else:
        assert "two" not in agent.started


async def test_a_bad_policy_is_4_00(serve_app: Callable[..., Awaitable[Any]]) -> None:
    async with _client(serve_app, "enqueue", "server") as (client, agent, _):
        bad = client.signer.make("ask", "x", to=client.to, ext={"uamp.on_busy": "later"})
        with pytest.raises(EnvelopeClientError) as refused:
            await client.exchange(bad)
    assert refused.value.code == "4.00"
    assert agent.started == []
