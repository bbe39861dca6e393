"""A response.cancel that arrives after the core has ended the response never loses its end."""

from __future__ import annotations

import orjson
import trio
import trio.testing

from tests._support.agents import TestAgent
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.hosting.sessions import SessionHost, SessionLimits

TIMEOUT = 10


class OneDelta(TestAgent):
    name = "one"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="hello")))


def message(**fields: object) -> bytes:
    return orjson.dumps({"session_id": "s", **fields})


CREATE = message(type="session.create", uamp_version="1.0", session={"modalities": ["text"]})


def open_host(nursery: trio.Nursery, **limits: int) -> SessionHost:
    """A host of :class:`OneDelta` with session ``s`` created (its replies still queued)."""
    agent = OneDelta()
    host = SessionHost(nursery, {"one": agent}, agent, limits=SessionLimits(**limits))
    host.feed(CREATE)
    return host


def ask(host: SessionHost, text: str = "hi", session_id: str = "s") -> None:
    """Feed one ``input.text`` and a ``response.create``."""
    host.feed(orjson.dumps({"type": "input.text", "session_id": session_id, "text": text}))
    host.feed(orjson.dumps({"type": "response.create", "session_id": session_id}))


async def test_a_cancel_racing_a_queued_response_done_keeps_done_and_sends_no_cancelled() -> None:
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            # Room for two events: response.created and the delta. The task
            # then waits to queue response.done, which the core has applied.
            host = open_host(nursery, outbox_size=2)
            ask(host)
            await trio.testing.wait_all_tasks_blocked()
            sent = [orjson.loads(m) for m in await host.outbox.take()]
            rid = next(e["response_id"] for e in sent if e["type"] == "response.created")
            # Taking freed the room: the task queues response.done now...
            await trio.testing.wait_all_tasks_blocked()
            # ...and a cancel for that response, racing its end, changes nothing.
            assert host.feed(message(type="response.cancel", response_id=rid)) == []
            await trio.testing.wait_all_tasks_blocked()
            sent += [orjson.loads(m) for m in await host.outbox.take()]
            assert not host.busy
            nursery.cancel_scope.cancel()
    types = [e["type"] for e in sent]
    assert types[-3:] == ["response.created", "response.delta", "response.done"], types
    assert "response.cancelled" not in types
    assert sent[-1]["response"]["output"] == [{"type": "text", "text": "hello"}]


async def test_a_cancel_while_response_done_waits_for_room_still_delivers_done() -> None:
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            host = open_host(nursery, outbox_size=2)
            owed = await host.outbox.take()  # session.created, capabilities
            assert len(owed) == 2
            ask(host)
            await trio.testing.wait_all_tasks_blocked()
            # Two events queued, the task parked putting response.done (shielded).
            assert host.busy and len(host.outbox) == 2
            ctx = host.conn.sessions["s"]
            rid = ctx.finished_responses[-1]
            assert host.feed(message(type="response.cancel", response_id=rid)) == []
            await trio.testing.wait_all_tasks_blocked()
            assert host.busy  # still waiting for room, not cancelled away
            sent = [orjson.loads(m) for m in await host.outbox.take()]
            await trio.testing.wait_all_tasks_blocked()
            sent += [orjson.loads(m) for m in await host.outbox.take()]
            assert not host.busy
            nursery.cancel_scope.cancel()
    types = [e["type"] for e in sent]
    assert types == ["response.created", "response.delta", "response.done"], types


async def test_a_late_cancel_does_not_touch_the_next_response() -> None:
    """The session's worker runs both: a cancel meant for the first must not end the second."""
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            host = open_host(nursery, outbox_size=2)
            await host.outbox.take()  # session.created, capabilities
            ask(host)
            await trio.testing.wait_all_tasks_blocked()
            # The worker waits (shielded) to queue the first response.done,
            # which the core has applied: the session is free for another.
            first = host.conn.sessions["s"].finished_responses[-1]
            assert host.feed(message(type="response.cancel", response_id=first)) == []
            ask(host, "again")
            sent: list[dict[str, object]] = []
            while host.busy or len(host.outbox):
                sent += [orjson.loads(m) for m in await host.outbox.take()]
                await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    types = [e["type"] for e in sent]
    assert types == ["response.created", "response.delta", "response.done"] * 2, types
    assert sent[2]["response_id"] == first and sent[5]["response_id"] != first


async def test_a_cancel_before_the_worker_starts_the_response_ends_it_cancelled() -> None:
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            host = open_host(nursery)
            await host.outbox.take()
            for text in ("one", "two"):
                # The second time the worker is idle, not newly started.
                ask(host, text)
                rid = host.conn.sessions["s"].response.response_id  # type: ignore[union-attr]
                assert host.feed(message(type="response.cancel", response_id=rid)) == []
                await trio.testing.wait_all_tasks_blocked()
                sent = [orjson.loads(m) for m in await host.outbox.take()]
                assert [e["type"] for e in sent] == ["response.cancelled"], sent
                assert sent[0]["response_id"] == rid
                assert not host.busy
            # The session still answers: a third response runs to its end.
            ask(host, "three")
            await trio.testing.wait_all_tasks_blocked()
            sent = [orjson.loads(m) for m in await host.outbox.take()]
            nursery.cancel_scope.cancel()
    assert [e["type"] for e in sent] == ["response.created", "response.delta", "response.done"]


async def test_a_sessions_worker_ends_with_the_session() -> None:
    """Ended sessions leave no parked worker behind (a long connection opens many)."""
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            host = open_host(nursery)  # session "s" starts no worker: it never asks
            for n in range(3):
                sid = f"s{n}"
                host.feed(
                    message(
                        type="session.create",
                        uamp_version="1.0",
                        session_id=sid,
                        session={"modalities": ["text"]},
                    )
                )
                ask(host, session_id=sid)
                await trio.testing.wait_all_tasks_blocked()
                assert len(nursery.child_tasks) == 1  # the session's worker, idle
                host.feed(message(type="session.end", session_id=sid))
                await trio.testing.wait_all_tasks_blocked()
                assert len(nursery.child_tasks) == 0
            sent = [orjson.loads(m)["type"] for m in await host.outbox.take()]
            nursery.cancel_scope.cancel()
    assert sent.count("response.done") == 3 and "response.cancelled" not in sent
