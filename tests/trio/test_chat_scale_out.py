"""One chat room across two ``uamp serve`` processes on one real Redis (docs/scale-out.md).

Alice's WebSocket reaches process A, Bob's and Carol's reach process B;
they are in one room. Presence, typing, messages (numbered once for the
whole room), the agent's answer streamed from the process that runs it and
read marks reach every participant, in one order, exactly once. A
participant that never reads is dropped on its own process; the others,
on either process, get every message.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.cli import uamp_serve
from tests._support.wire import recv, send
from tests.trio.transports.test_chat_rooms import REPLY, Reader

TIMEOUT = 60


@contextmanager
def two_processes(redis_url: str) -> Iterator[tuple[str, str]]:
    """Processes A and B sharing ``redis_url``; yields their WebSocket URLs."""
    serve = ("--store", redis_url, "--agent", "uamp_trio:DemoAgent")
    with uamp_serve(*serve) as a, uamp_serve(*serve) as b:
        yield tuple(f"ws://{u.removeprefix('http://')}/agents/demo/uamp" for u in (a, b))  # type: ignore[misc]


async def test_people_on_two_processes_are_in_one_room_in_one_order(redis_url: str) -> None:
    room = f"room-{uuid.uuid4().hex[:8]}"
    with two_processes(redis_url) as (at_a, at_b), trio.fail_after(TIMEOUT):
        async with open_ws(at_a) as a_ws, open_ws(at_b) as b_ws:
            a, b = Reader(a_ws), Reader(b_ws)
            alice = await a.join("alice", room)
            await a.expect(alice, [("presence.online", "demo")])
            bob = await b.join("bob", room)
            await b.expect(bob, [("presence.online", "alice"), ("presence.online", "demo")])
            await a.expect(alice, [("presence.online", "bob")])

            await send(a_ws, type="input.typing", is_typing=True, session_id=alice)
            await b.expect(bob, [("presence.typing", "alice", True)])
            await send(a_ws, type="input.text", text="hello all", session_id=alice)
            first = ("message.created", 1, "alice", "hello all")
            await a.expect(alice, [first])
            await b.expect(bob, [("presence.typing", "alice", False), first])

            # The agent runs on B (Bob's process); its answer streams to Alice on A too.
            await send(b_ws, type="input.text", text="@demo ping", session_id=bob)
            second = ("message.created", 2, "bob", "@demo ping")
            ids = set()
            for reader, sid in ((a, alice), (b, bob)):
                got = await reader.expect(sid, [second, *REPLY])
                ids |= {e["response_id"] for e in got if "response_id" in e}
            assert len(ids) == 1  # one answer, the same for both

            await send(a_ws, type="message.read", seq=3, session_id=alice)
            await b.expect(bob, [("message.read", "alice", 3)])

            # A late joiner on B gets the room as it is: who is here, history, marks.
            async with open_ws(at_b) as c_ws:
                c = Reader(c_ws)
                carol = await c.join("carol", room)
                history = [first, second, REPLY[-1]]
                await c.expect(
                    carol,
                    [
                        ("presence.online", "alice"),
                        ("presence.online", "demo"),
                        ("presence.online", "bob"),
                        *history,
                        ("message.read", "alice", 3),
                    ],
                )
                for reader, sid in ((a, alice), (b, bob)):
                    await reader.expect(sid, [("presence.online", "carol")])
            for reader, sid in ((a, alice), (b, bob)):
                await reader.expect(sid, [("presence.offline", "carol")])

            # Alice leaves while typing: her process clears it before she goes.
            await send(a_ws, type="input.typing", is_typing=True, session_id=alice)
            await b.expect(bob, [("presence.typing", "alice", True)])
            await send(a_ws, type="session.end", session_id=alice)
            await b.expect(
                bob, [("presence.typing", "alice", False), ("presence.offline", "alice")]
            )
            await b.quiet(bob)
            await a.quiet(alice)


async def test_a_participant_that_never_reads_slows_nobody_on_either_process(
    redis_url: str,
) -> None:
    room = f"room-{uuid.uuid4().hex[:8]}"
    messages, batch = 600, 100
    with two_processes(redis_url) as (at_a, at_b), trio.fail_after(TIMEOUT):
        async with open_ws(at_a) as a_ws, open_ws(at_b) as b_ws, open_ws(at_b) as idle_ws:
            a, b = Reader(a_ws), Reader(b_ws)
            alice = await a.join("alice", room)
            bob = await b.join("bob", room)
            await send(
                idle_ws,
                type="session.create",
                uamp_version="1.0",
                chat=room,
                session={"modalities": ["text"], "extensions": {"chat": {"username": "idle"}}},
            )
            assert (await recv(idle_ws))["type"] == "session.created"
            # From here the idle participant reads nothing at all. Alice sends in
            # batches (a session has at most 256 chat events waiting to be run).
            seen: dict[str, list[int]] = {"alice": [], "bob": []}
            for first in range(0, messages, batch):
                for n in range(first, first + batch):
                    await send(a_ws, type="input.text", text=f"m{n}", session_id=alice)
                for name, reader, sid in (("alice", a, alice), ("bob", b, bob)):
                    while len(seen[name]) < first + batch:
                        event = (await reader.take(sid, 1))[0]
                        if event["type"] == "message.created":
                            seen[name].append(event["seq"])
    # Everyone else got every message, once, in order.
    assert seen["alice"] == seen["bob"] == list(range(1, messages + 1))
