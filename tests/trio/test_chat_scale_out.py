"""One chat room across two ``uamp serve`` processes on one real Redis (docs/scale-out.md).

Alice's WebSocket reaches process A, Bob's and Carol's reach process B;
they are in one room. Presence, typing, messages (numbered once for the
whole room), the agent's answer streamed from the process that runs it and
read marks reach every participant, in one order, exactly once. A
participant that never reads is dropped on its own process; the others,
on either process, get every message. A process killed outright has its
participants leave: the survivors tell theirs once, and the room goes on.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.cli import doomed_serve, uamp_serve
from tests._support.wire import recv, send
from tests.trio.transports.test_chat_rooms import REPLY, Reader, summary

TIMEOUT = 60


@contextmanager
def two_processes(redis_url: str, *flags: str) -> Iterator[tuple[str, str]]:
    """Processes A and B sharing ``redis_url`` (and ``flags``); yields their WebSocket URLs."""
    serve = ("--store", redis_url, "--agent", "uamp_trio:DemoAgent", *flags)
    with uamp_serve(*serve) as a, uamp_serve(*serve) as b:
        yield tuple(_ws(u) for u in (a, b))  # type: ignore[misc]


def _ws(url: str) -> str:
    return f"ws://{url.removeprefix('http://')}/agents/demo/uamp"


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
    # Alice posts 600 messages within the minute: past the default per-principal rate.
    rate = ("--chat-principal-messages", "1000")
    with two_processes(redis_url, *rate) as (at_a, at_b), trio.fail_after(TIMEOUT):
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


async def test_a_killed_process_s_participants_go_offline_once_for_the_others(
    redis_url: str,
) -> None:
    room = f"room-{uuid.uuid4().hex[:8]}"
    serve = ("--store", redis_url, "--agent", "uamp_trio:DemoAgent")
    with (
        doomed_serve(*serve) as (doomed, url_a),
        uamp_serve(*serve) as url_b,
        uamp_serve(*serve) as url_c,
        trio.fail_after(TIMEOUT),
    ):
        async with (
            open_ws(_ws(url_a)) as a_ws,
            open_ws(_ws(url_b)) as b_ws,
            open_ws(_ws(url_c)) as c_ws,
        ):
            a, b, c = Reader(a_ws), Reader(b_ws), Reader(c_ws)
            alice = await a.join("alice", room)
            await a.expect(alice, [("presence.online", "demo")])
            bob = await b.join("bob", room)
            await b.expect(bob, [("presence.online", "alice"), ("presence.online", "demo")])
            carol = await c.join("carol", room)
            here = sorted(summary(e) for e in await c.take(carol, 3))  # a hash's order
            assert here == [("presence.online", n) for n in ("alice", "bob", "demo")]
            await b.expect(bob, [("presence.online", "carol")])
            await send(a_ws, type="input.typing", is_typing=True, session_id=alice)
            survivors = ((b, bob), (c, carol))
            for reader, sid in survivors:
                await reader.expect(sid, [("presence.typing", "alice", True)])

            doomed.kill()  # SIGKILL: A says nothing more, its heartbeat lapses
            # Both survivors watch A; one of them takes Alice out, each hears it once.
            for reader, sid in survivors:
                await reader.expect(
                    sid, [("presence.typing", "alice", False), ("presence.offline", "alice")]
                )
            await send(b_ws, type="input.text", text="still here", session_id=bob)
            for reader, sid in survivors:
                await reader.expect(sid, [("message.created", 1, "bob", "still here")])
            for reader, sid in survivors:
                await reader.quiet(sid, 3.0)  # past the other survivor's next checks

            # A newcomer sees who is left; the store keeps none of A's members.
            dave = await c.join("dave", room)
            got = await c.take(dave, 4)
            summaries = [summary(e) for e in got]
            assert sorted(summaries[:3]) == sorted(
                ("presence.online", n) for n in ("bob", "carol", "demo")
            )
            assert summaries[3] == ("message.created", 1, "bob", "still here")
            client = redis.Redis.from_url(redis_url)
            try:
                present = [
                    member.decode()
                    for name in client.scan_iter(match="*chat:pres:*")
                    for member in client.hkeys(name)
                ]
            finally:
                client.close()
            assert len([m for m in present if m.startswith(f"{doomed.pid}-")]) == 0
            assert len(present) >= 3  # Bob, Carol and Dave are still there


async def test_an_answer_whose_process_is_killed_ends_interrupted_for_the_others(
    redis_url: str,
) -> None:
    room = f"room-{uuid.uuid4().hex[:8]}"
    serve = ("--store", redis_url, "--agent", "tests._support.agents:Ticker")
    ticker_ws = "/agents/ticker/uamp"
    with (
        doomed_serve(*serve) as (doomed, url_a),
        uamp_serve(*serve) as url_b,
        trio.fail_after(TIMEOUT),
    ):
        async with (
            open_ws(_ws(url_a).replace("/agents/demo/uamp", ticker_ws)) as a_ws,
            open_ws(_ws(url_b).replace("/agents/demo/uamp", ticker_ws)) as b_ws,
        ):
            a, b = Reader(a_ws), Reader(b_ws)
            alice = await a.join("alice", room)
            await a.expect(alice, [("presence.online", "ticker")])
            bob = await b.join("bob", room)
            await b.expect(bob, [("presence.online", "alice"), ("presence.online", "ticker")])
            await a.expect(alice, [("presence.online", "bob")])

            # Alice asks; the ticker answers on A (her process) and streams to Bob on B.
            await send(a_ws, type="input.text", text="@ticker go", session_id=alice)
            await b.expect(
                bob,
                [
                    ("message.created", 1, "alice", "@ticker go"),
                    ("presence.typing", "ticker", True),
                    ("response.created", "ticker"),
                ],
            )
            deltas = await b.take(bob, 3)
            assert [summary(e) for e in deltas] == [
                ("response.delta", f"tick {i} ") for i in range(3)
            ]
            response_id = deltas[0]["response_id"]
            doomed.kill()  # SIGKILL mid-answer

            # Bob's process ends the answer A was streaming, then Alice goes.
            ended: list[dict[str, object]] = []
            while not ended or ended[-1]["type"] != "presence.offline":
                event = (await b.take(bob, 1))[0]
                if event["type"] != "response.delta":
                    ended.append(event)
            assert [summary(e) for e in ended] == [
                ("response.error", "interrupted"),
                ("presence.typing", "ticker", False),
                ("presence.offline", "alice"),
            ]
            assert ended[0]["response_id"] == response_id
            assert ended[0]["chat_id"] == room and ended[0]["sender"]["id"] == "ticker"  # type: ignore[index]
            await b.quiet(bob, 2.0)  # once: no second end, no second departure
