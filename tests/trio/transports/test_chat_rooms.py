"""Chat rooms over real sockets (UAMP 6.18, 7.1; docs/chat.md).

Three people and the demo agent in one room over real WebSockets -- one
connection multiplexing two sessions -- with every participant's whole
event sequence checked; typing throttled on the wire; read receipts both
ways; a late joiner's history and read marks; a participant that never
reads; ownership under authentication; HTTP+SSE participants; the room's
answer policy and payment.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import trio
from trio_websocket import WebSocketConnection
from trio_websocket import open_websocket_url as open_ws

from tests._support import wire
from tests._support.agents import TestAgent
from tests._support.wire import recv, send
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.payment import TokenPolicy
from uamp_proto.responder import Emit, Responder, TurnRequest
from uamp_trio import App, DemoAgent
from uamp_trio.hosting.chats import ChatLimits
from uamp_trio.hosting.sessions import SessionLimits
from uamp_trio.stores import Stores
from uamp_trio.stores.chats_sqlite import SqliteChatStore
from uamp_trio.transports import sse_events, uamp_ws
from uamp_trio.trust.auth import APIKeyAuthenticator

TIMEOUT = 20
Event = dict[str, Any]

#: The event types a room sends (the rest -- session.created, capabilities -- are not checked here).
ROOM_TYPES = {
    "presence.online",
    "presence.offline",
    "presence.typing",
    "message.created",
    "message.read",
    "response.created",
    "response.delta",
    "usage.delta",
    "response.done",
    "response.error",
    "session.end",
    "session.error",
}


def summary(e: Event) -> tuple[Any, ...]:
    """What the order checks compare of one event."""
    t = e["type"]
    if t in ("presence.online", "presence.offline"):
        return (t, e["user_id"])
    if t == "presence.typing":
        return (t, e["user_id"], e["is_typing"])
    if t == "message.created":
        return (t, e["seq"], e["sender"]["id"], e["message"]["content"])
    if t == "message.read":
        return (t, e["user_id"], e["seq"])
    if t in ("response.created", "response.done", "usage.delta"):
        return (t, e["sender"]["id"])
    if t == "response.delta":
        return (t, e["delta"]["text"])
    if t == "session.end":
        return (t, e.get("reason"))
    return (t, e["error"]["code"])


class Reader:
    """The events of one WebSocket, by session, as they arrive."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws
        self.by_session: dict[str, list[Event]] = defaultdict(list)

    async def take(self, sid: str, count: int) -> list[Event]:
        """The next ``count`` room events of session ``sid``."""
        buf = self.by_session[sid]
        while len(buf) < count:
            event = await recv(self.ws)
            if event["type"] in ROOM_TYPES:
                assert "session_id" in event, event
                self.by_session[event["session_id"]].append(event)
        out, self.by_session[sid] = buf[:count], buf[count:]
        return out

    async def take_any(self, sid: str) -> Event:
        """The next event of session ``sid``, whatever its type."""
        buf = self.by_session[sid]
        while not buf:
            event = await recv(self.ws)
            self.by_session[event.get("session_id", "")].append(event)
        return buf.pop(0)

    async def expect(self, sid: str, expected: list[tuple[Any, ...]]) -> list[Event]:
        """Read as many room events as ``expected`` holds and check them, in order."""
        got = await self.take(sid, len(expected))
        assert [summary(e) for e in got] == expected
        return got

    async def join(self, name: str, chat: str = "room", **extra: Any) -> str:
        """Open a session in ``chat`` on this socket, keeping other sessions' events."""
        settings = {"username": name, **extra.pop("settings", {})}
        await send(
            self.ws,
            type="session.create",
            uamp_version="1.0",
            chat=chat,
            session={"modalities": ["text"], "extensions": {"chat": settings}},
            **extra,
        )
        while True:
            event = await recv(self.ws)
            if event["type"] == "session.created":
                sid = str(event["session_id"])
                assert (await recv(self.ws))["type"] == "capabilities"
                return sid
            self.by_session[event["session_id"]].append(event)

    async def quiet(self, sid: str, seconds: float = 0.3) -> None:
        """Nothing more arrives for ``sid`` within ``seconds``."""
        with trio.move_on_after(seconds):
            await self.take(sid, 1)
        assert self.by_session[sid] == []


async def join(ws: WebSocketConnection, name: str, chat: str = "room", **extra: Any) -> str:
    settings = {"username": name, **extra.pop("settings", {})}
    return await wire.create_session(
        ws, chat=chat, session={"extensions": {"chat": settings}}, **extra
    )


@asynccontextmanager
async def serving(
    agents: list[Responder] | None = None,
    limits: SessionLimits | None = None,
    chat_limits: ChatLimits | None = None,
    config: dict[str, Any] | None = None,
    **app: Any,
) -> AsyncIterator[str]:
    the_app = App(agents if agents is not None else [DemoAgent()], **app)
    if chat_limits is not None:
        the_app.chats.limits = chat_limits
    the_app.mount(
        lambda a: uamp_ws.mount(a, uamp_ws.UampWebSocketConfig(limits=limits)), sse_events.mount
    )
    async with wire.serving(the_app, **(config or {})) as server:
        yield f"127.0.0.1:{server.port}"


@asynccontextmanager
async def alice_and_bob(**options: Any) -> AsyncIterator[tuple[str, Reader, str, Reader, str]]:
    """A server, and Alice then Bob in its room "room" (their presence events read)."""
    async with serving(**options) as host:
        url = f"ws://{host}/agents/demo/uamp"
        async with open_ws(url) as a_ws, open_ws(url) as b_ws:
            a, b = Reader(a_ws), Reader(b_ws)
            alice = await join(a_ws, "alice")
            await a.expect(alice, [("presence.online", "demo")])
            bob = await join(b_ws, "bob")
            await b.expect(bob, [("presence.online", "alice"), ("presence.online", "demo")])
            await a.expect(alice, [("presence.online", "bob")])
            yield host, a, alice, b, bob


REPLY = [
    ("presence.typing", "demo", True),
    ("response.created", "demo"),
    ("response.delta", "You "),
    ("response.delta", "said: "),
    ("response.delta", "@demo "),
    ("response.delta", "ping"),
    ("usage.delta", "demo"),
    ("response.done", "demo"),
    ("presence.typing", "demo", False),
    ("message.created", 3, "demo", "You said: @demo ping"),
]


async def test_three_people_and_an_agent_in_one_room_in_order() -> None:
    with trio.fail_after(TIMEOUT):
        async with alice_and_bob() as (host, a, alice, b, bob):
            a_ws, b_ws = a.ws, b.ws
            async with open_ws(f"ws://{host}/ws") as m_ws:
                m = Reader(m_ws)
                # Carol and Dave share one socket: two multiplexed sessions.
                carol = await join(m_ws, "carol", agent="demo")
                await m.expect(
                    carol,
                    [
                        ("presence.online", "alice"),
                        ("presence.online", "demo"),
                        ("presence.online", "bob"),
                    ],
                )
                for reader, sid in ((a, alice), (b, bob)):
                    await reader.expect(sid, [("presence.online", "carol")])
                dave = await join(m_ws, "dave", agent="demo")
                await m.expect(
                    dave,
                    [
                        ("presence.online", "alice"),
                        ("presence.online", "demo"),
                        ("presence.online", "bob"),
                        ("presence.online", "carol"),
                    ],
                )
                for reader, sid in ((a, alice), (b, bob), (m, carol)):
                    await reader.expect(sid, [("presence.online", "dave")])

                await send(a_ws, type="input.text", text="hello all", session_id=alice)
                first = ("message.created", 1, "alice", "hello all")
                for reader, sid in ((a, alice), (b, bob), (m, carol), (m, dave)):
                    await reader.expect(sid, [first])

                await send(b_ws, type="input.text", text="@demo ping", session_id=bob)
                second = ("message.created", 2, "bob", "@demo ping")
                for reader, sid in ((a, alice), (b, bob), (m, carol), (m, dave)):
                    got = await reader.expect(sid, [second, *REPLY])
                    # One response, one id, for everyone.
                    ids = {e["response_id"] for e in got if "response_id" in e}
                    assert len(ids) == 1

                await send(m_ws, type="message.read", seq=3, session_id=carol)
                for reader, sid in ((a, alice), (b, bob), (m, dave)):
                    await reader.expect(sid, [("message.read", "carol", 3)])

                await send(m_ws, type="session.end", session_id=dave)
                for reader, sid in ((a, alice), (b, bob), (m, carol)):
                    await reader.expect(sid, [("presence.offline", "dave")])
            await a_ws.aclose()
            # Alice gone too (her socket closed), Carol's with the mux socket:
            # Bob hears both, in the order they left, and nothing else.
            await b.expect(bob, [("presence.offline", "carol"), ("presence.offline", "alice")])
            await b.quiet(bob)


async def test_typing_at_50_per_second_reaches_the_others_a_few_times_a_second() -> None:
    with trio.fail_after(TIMEOUT):
        async with alice_and_bob() as (_, _a, alice, b, bob):
            a_ws = _a.ws
            start = trio.current_time()
            for n in range(50):  # one second at 50/s, flipping every time
                await send(a_ws, type="input.typing", is_typing=n % 2 == 0, session_id=alice)
                await trio.sleep(0.02)
            elapsed = trio.current_time() - start
            # The last state (stopped) arrives once the interval allows.
            told = []
            while not told or told[-1]["is_typing"]:
                told += await b.take(bob, 1)
            assert all(e["type"] == "presence.typing" for e in told)
            assert all(e["user_id"] == "alice" and e["username"] == "alice" for e in told)
            assert len(told) <= 4 * elapsed + 2
            assert [e["is_typing"] for e in told] == [n % 2 == 0 for n in range(len(told))]
            await b.quiet(bob)


async def test_typing_is_cleared_after_the_timeout_and_by_a_message() -> None:
    with trio.fail_after(TIMEOUT):
        async with alice_and_bob(chat_limits=ChatLimits(typing_timeout=0.5)) as (
            _,
            _a,
            alice,
            b,
            bob,
        ):
            a_ws = _a.ws
            await send(a_ws, type="input.typing", is_typing=True, session_id=alice)
            began = trio.current_time()
            await b.expect(bob, [("presence.typing", "alice", True)])
            # Alice goes quiet: cleared once the timeout has passed.
            await b.expect(bob, [("presence.typing", "alice", False)])
            assert trio.current_time() - began >= 0.5
            await send(a_ws, type="input.typing", is_typing=True, session_id=alice)
            await b.expect(bob, [("presence.typing", "alice", True)])
            await send(a_ws, type="input.text", text="done typing", session_id=alice)
            await b.expect(
                bob,
                [
                    ("presence.typing", "alice", False),
                    ("message.created", 1, "alice", "done typing"),
                ],
            )


async def test_read_receipts_both_ways_and_a_late_joiner_gets_history_and_marks() -> None:
    with trio.fail_after(TIMEOUT):
        async with alice_and_bob() as (host, a, alice, b, bob):
            a_ws, b_ws = a.ws, b.ws
            url = f"ws://{host}/agents/demo/uamp"
            for n, (ws, sid) in enumerate(((a_ws, alice), (b_ws, bob), (a_ws, alice))):
                await send(ws, type="input.text", text=f"m{n + 1}", session_id=sid)
                for reader, rsid in ((a, alice), (b, bob)):
                    got = await reader.take(rsid, 1)
                    assert got[0]["seq"] == n + 1
            ids = {e["seq"]: e["message_id"] for e in got}
            # Bob read up to 3 (by id), Alice up to 2 (by seq): each learns the other's.
            await send(b_ws, type="message.read", message_id=got[0]["message_id"], session_id=bob)
            read = await a.expect(alice, [("message.read", "bob", 3)])
            assert read[0]["message_id"] == ids[3] and read[0]["read_at"] > 0
            await send(a_ws, type="message.read", seq=2, session_id=alice)
            await b.expect(bob, [("message.read", "alice", 2)])
            # Reading an older message again moves nothing and says nothing.
            await send(b_ws, type="message.read", seq=1, session_id=bob)
            await a.quiet(alice)
            # A message that does not exist is the reader's error alone.
            await send(b_ws, type="message.read", seq=99, session_id=bob)
            await b.expect(bob, [("session.error", "unknown_message")])
            async with open_ws(url) as c_ws:
                carol = await join(c_ws, "carol")
                await Reader(c_ws).expect(
                    carol,
                    [
                        ("presence.online", "alice"),
                        ("presence.online", "demo"),
                        ("presence.online", "bob"),
                        ("message.created", 1, "alice", "m1"),
                        ("message.created", 2, "bob", "m2"),
                        ("message.created", 3, "alice", "m3"),
                        ("message.read", "bob", 3),
                        ("message.read", "alice", 2),
                    ],
                )


async def test_a_participant_that_never_reads_is_dropped_and_the_others_lose_nothing() -> None:
    limits = SessionLimits(max_pushed=16, send_timeout=30)
    big = "x" * 256_000
    count = 120
    # 120 messages of 256 KB: over the default chat message size.
    config = {"chat_max_message_bytes": 300_000}
    with trio.fail_after(TIMEOUT * 2):
        async with serving(limits=limits, config=config) as host:
            url = f"ws://{host}/agents/demo/uamp"
            async with open_ws(url) as a_ws, open_ws(url) as b_ws, open_ws(url) as s_ws:
                a, b = Reader(a_ws), Reader(b_ws)
                alice = await join(a_ws, "alice")
                bob = await join(b_ws, "bob")
                await join(s_ws, "slow")
                await a.take(alice, 3)  # demo, bob, slow online
                await b.take(bob, 3)
                # "slow" stops reading; Alice talks, Alice and Bob read everything.
                seen: dict[str, list[Event]] = {alice: [], bob: []}

                async def read_all(reader: Reader, sid: str) -> None:
                    while sum(e["type"] == "message.created" for e in seen[sid]) < count:
                        seen[sid] += await reader.take(sid, 1)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read_all, b, bob)
                    for n in range(count):
                        # Alice waits for her own copy: she is a reader that keeps up.
                        await send(a_ws, type="input.text", text=f"{n} {big}", session_id=alice)
                        while not any(e.get("seq") == n + 1 for e in seen[alice]):
                            seen[alice] += await a.take(alice, 1)
                for got in seen.values():
                    created = [e for e in got if e["type"] == "message.created"]
                    assert [e["seq"] for e in created] == list(range(1, count + 1))
                    assert [e["message"]["content"] for e in created] == [
                        f"{n} {big}" for n in range(count)
                    ]
                    # The lagging participant left the room on the way.
                    assert ("presence.offline", "slow") in [summary(e) for e in got]


async def test_someone_elses_room_is_like_a_room_nobody_used() -> None:
    auth = APIKeyAuthenticator([("alice", "ka"), ("bob", "kb"), ("carol", "kc")])
    with trio.fail_after(TIMEOUT):
        async with serving(authenticator=auth) as host:
            url = f"ws://{host}/agents/demo/uamp"
            async with open_ws(url + "?token=ka") as a_ws:
                a = Reader(a_ws)
                # A name claimed in the settings does not beat the principal.
                alice = await join(a_ws, "alice", settings={"members": ["bob"], "user_id": "root"})
                await a.expect(alice, [("presence.online", "demo")])
                await send(a_ws, type="input.text", text="for bob only", session_id=alice)
                await a.take(alice, 1)
                async with open_ws(url + "?token=kc") as c_ws, open_ws(url + "?token=kb") as b_ws:
                    carol = await join(c_ws, "carol")
                    # Carol, not a member: a new, empty room of her own.
                    await Reader(c_ws).expect(carol, [("presence.online", "demo")])
                    await Reader(c_ws).quiet(carol)
                    bob = await join(b_ws, "bob")
                    await Reader(b_ws).expect(
                        bob,
                        [
                            ("presence.online", "alice"),
                            ("presence.online", "demo"),
                            ("message.created", 1, "alice", "for bob only"),
                        ],
                    )
                    await a.expect(alice, [("presence.online", "bob")])
                    await send(c_ws, type="input.text", text="anyone?", session_id=carol)
                    await a.quiet(alice)


async def test_the_rooms_policy_every_message_and_rules() -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving([DemoAgent(), DemoAgent("helper")]) as host,
            open_ws(f"ws://{host}/ws") as ws,
        ):
            r = Reader(ws)
            rules = {
                "respond": "rules",
                "rules": [{"match": "help", "agent": "helper", "priority": 1}],
            }
            one = await r.join("ann", agent="demo", chat="ruled", settings=rules)
            await r.join("ann", agent="helper", chat="ruled")
            await r.take(one, 2)  # demo, then helper, online (ann is one user)
            await send(ws, type="input.text", text="please help", session_id=one)
            got = await r.take(one, 1 + len(REPLY))
            assert summary(got[1]) == ("presence.typing", "helper", True)
            assert summary(got[-1])[2] == "helper"
            await send(ws, type="input.text", text="nothing to match", session_id=one)
            await r.expect(one, [("message.created", 3, "ann", "nothing to match")])
            await r.quiet(one)
            every = await join(ws, "ann", agent="demo", chat="busy", settings={"respond": "every"})
            await r.take(every, 1)
            await send(ws, type="input.text", text="hi", session_id=every)
            got = await r.take(every, len(REPLY))
            assert summary(got[-1]) == ("message.created", 2, "demo", "You said: hi")
            bad = await r.join("ann", agent="demo", chat="bad", settings={"respond": "often"})
            await r.expect(bad, [("session.error", "invalid_event")])


async def test_an_unpaid_agent_does_not_answer_in_a_room() -> None:
    policy = TokenPolicy({"ptok"}, amount="1.00")
    with trio.fail_after(TIMEOUT):
        async with serving(payment_policy=policy) as host:
            url = f"ws://{host}/agents/demo/uamp"
            async with open_ws(url) as ws:
                r = Reader(ws)
                sid = await join(ws, "alice")
                await r.take(sid, 1)
                await send(ws, type="input.text", text="@demo hi", session_id=sid)
                await r.expect(
                    sid,
                    [
                        ("message.created", 1, "alice", "@demo hi"),
                        ("session.error", "payment_required"),
                    ],
                )
                await send(
                    ws, type="input.text", text="@demo hi", session_id=sid, payment_token="ptok"
                )
                got = await r.take(sid, 1 + len(REPLY))
                assert summary(got[-1]) == ("message.created", 3, "demo", "You said: @demo hi")


async def test_an_sse_participant_talks_with_a_websocket_one(tmp_path: Any) -> None:
    stores = Stores(chats=SqliteChatStore(tmp_path / "chats.db"))
    with trio.fail_after(TIMEOUT):
        async with serving(stores=stores) as host, open_ws(f"ws://{host}/agents/demo/uamp") as ws:
            w = Reader(ws)
            alice = await join(ws, "alice")
            await w.take(alice, 1)
            async with httpx.AsyncClient(base_url=f"http://{host}/agents/demo") as http:
                create = {
                    **wire.CREATE,
                    "chat": "room",
                    "session": {
                        "modalities": ["text"],
                        "extensions": {"chat": {"username": "sam"}},
                    },
                }
                resp = await wire.post(http, create)
                sid = resp.headers["x-session-id"]
                async with wire.open_stream(http, sid) as stream:
                    await stream.until("capabilities")
                    await w.expect(alice, [("presence.online", "sam")])
                    await send(ws, type="input.text", text="hi sam", session_id=alice)
                    got = await stream.until("message.created")
                    assert summary(got[-1]) == ("message.created", 1, "alice", "hi sam")
                    await wire.post(http, {"type": "input.text", "text": "hi alice"}, sid)
                    await w.expect(
                        alice,
                        [
                            ("message.created", 1, "alice", "hi sam"),
                            ("message.created", 2, "sam", "hi alice"),
                        ],
                    )
    assert orjson.loads(orjson.dumps(got[-1]))["sender"]["kind"] == "user"


async def test_a_silent_peer_times_out_and_goes_offline() -> None:
    limits = SessionLimits(keepalive_interval=0.3)
    with trio.fail_after(TIMEOUT):
        async with serving(limits=limits) as host:
            url = f"ws://{host}/agents/demo/uamp"
            async with open_ws(url) as a_ws:
                a = Reader(a_ws)
                alice = await join(a_ws, "alice")
                await a.take(alice, 1)
                # A raw TCP peer that completes the handshake and then never answers pings.
                stream = await trio.open_tcp_stream("127.0.0.1", int(host.split(":")[1]))
                await stream.send_all(
                    b"GET /agents/demo/uamp HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                    b"Sec-WebSocket-Version: 13\r\n\r\n"
                )
                await stream.receive_some(4096)
                create = orjson.dumps(
                    {
                        "type": "session.create",
                        "uamp_version": "1.0",
                        "chat": "room",
                        "session": {
                            "modalities": ["text"],
                            "extensions": {"chat": {"username": "mute"}},
                        },
                    }
                )
                mask = b"\x00\x00\x00\x00"
                header = bytes([0x81, 0x80 | 126]) + len(create).to_bytes(2, "big") + mask
                await stream.send_all(header + create)
                await a.expect(alice, [("presence.online", "mute")])
                await a.expect(alice, [("presence.offline", "mute")])
                await stream.aclose()


#: A client's capability declaration (UAMP 9), the fields the spec requires.
_CLIENT = {
    "id": "ann-phone",
    "provider": "test",
    "supports_streaming": True,
    "supports_thinking": False,
    "supports_caching": False,
}


class Recorder(TestAgent):
    """Answers "ok" and keeps what it was asked."""

    name = "rec"

    def __init__(self) -> None:
        self.requests: list[TurnRequest] = []

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.requests.append(request)
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))


async def test_the_answering_agent_gets_the_context_and_the_room() -> None:
    rec = Recorder()
    with trio.fail_after(TIMEOUT):
        async with serving([rec]) as host, open_ws(f"ws://{host}/agents/rec/uamp") as ws:
            r = Reader(ws)
            sid = await r.join(
                "ann",
                settings={"respond": "every", "user_id": "u1"},
                client_capabilities={**_CLIENT, "modalities": ["text", "image"]},
            )
            await r.take(sid, 1)
            # The client can no longer show images, and says it mid-session (5.5).
            await send(
                ws,
                type="client.capabilities",
                session_id=sid,
                capabilities={**_CLIENT, "modalities": ["text"], "widgets": ["table"]},
            )
            context = {"mood": "curious", "sender_id": "someone-else"}
            await send(ws, type="input.text", text="hi", context=context, session_id=sid)
            got = await r.take(sid, 7)
            assert summary(got[-1]) == ("message.created", 2, "rec", "ok")
    (request,) = rec.requests
    # The client's keys arrive; the room and the sender are the server's.
    assert request.context == {"mood": "curious", "chat_id": "room", "sender_id": "u1"}
    assert request.metadata["chat"]["seq"] == 1
    # ... and the poster's client capabilities, as merged so far.
    assert request.client_capabilities is not None
    assert request.client_capabilities.id == "ann-phone"
    assert request.client_capabilities.modalities == ["text"]
    assert request.client_capabilities.widgets == ["table"]
    assert [(m.role, m.text) for m in request.messages] == [("user", "hi")]


# --- refusals for a rate (UAMP 6.3 rate_limited) ------------------------------------------


async def test_answers_past_the_rooms_limit_are_refused_rate_limited() -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving(
                [DemoAgent(), DemoAgent("helper")], chat_limits=ChatLimits(max_answers=1)
            ) as host,
            open_ws(f"ws://{host}/ws") as ws,
        ):
            r = Reader(ws)
            one = await r.join("ann", agent="demo", chat="busy", settings={"respond": "every"})
            await r.join("ann", agent="helper", chat="busy")
            await r.expect(one, [("presence.online", "demo"), ("presence.online", "helper")])
            await send(ws, type="input.text", text="hi", session_id=one)
            got = await r.take(one, 2)
            assert summary(got[0]) == ("message.created", 1, "ann", "hi")
            refused = got[1]
            assert summary(refused) == ("session.error", "rate_limited")
            assert refused["error"]["details"] == {"limit": 1, "agent": "helper", "chat_id": "busy"}
            # One agent answers; the room goes on.
            await r.expect(
                one,
                [
                    ("presence.typing", "demo", True),
                    ("response.created", "demo"),
                    ("response.delta", "You "),
                    ("response.delta", "said: "),
                    ("response.delta", "hi"),
                    ("usage.delta", "demo"),
                    ("response.done", "demo"),
                    ("presence.typing", "demo", False),
                    ("message.created", 2, "demo", "You said: hi"),
                ],
            )


async def test_a_flood_of_chat_events_is_refused_rate_limited() -> None:
    limits = ChatLimits(queued_chat_events=3)
    with trio.fail_after(TIMEOUT):
        async with (
            serving(chat_limits=limits) as host,
            open_ws(f"ws://{host}/agents/demo/uamp") as ws,
        ):
            w = Reader(ws)
            alice = await join(ws, "alice")
            await w.take(alice, 1)
            async with httpx.AsyncClient(base_url=f"http://{host}/agents/demo") as http:
                create = {**wire.CREATE, "chat": "room", "session": {"modalities": ["text"]}}
                resp = await wire.post(http, create)
                sid = resp.headers["x-session-id"]
                async with wire.open_stream(http, sid) as stream:
                    await stream.until("capabilities")
                    # Ten messages in one POST: all reach the server before its
                    # chat task takes the first, so past 3 waiting they are refused.
                    flood = [{"type": "input.text", "text": f"m{n}"} for n in range(10)]
                    await wire.post(http, flood, sid)
                    errors = []
                    while len(errors) < 10 - 3:
                        event = await stream.next()
                        if event["type"] == "session.error":
                            errors.append(event)
                    for error in errors:
                        assert error["error"]["code"] == "rate_limited"
                        assert error["error"]["details"] == {"limit": 3, "event_type": "say"}
                    # What was queued was posted, in order; the session goes on.
                    await wire.post(http, {"type": "input.text", "text": "after"}, sid)
                    got = await w.take(alice, 5)
                    assert [summary(e)[3] for e in got if e["type"] == "message.created"] == [
                        "m0",
                        "m1",
                        "m2",
                        "after",
                    ]
