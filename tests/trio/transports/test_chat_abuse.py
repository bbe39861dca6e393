"""Chat rooms in front of strangers (issue 29): answer rules, failures, credentials, memory.

Every test runs a real server on 127.0.0.1 and speaks UAMP over real
WebSockets. Each reproduces an abuse that hurt the server before (a rule that
stopped the process, a rule that froze the event loop, ...) and checks that
now only the abuser's own request is refused and everyone else is served.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support import wire
from tests._support.wire import send
from tests.trio.transports.test_chat_rooms import Reader, serving, summary
from tests.trio.trust.agents import CountingAgent
from tests.trio.trust.issuer import Issuer
from uamp_trio import App, DemoAgent
from uamp_trio.app import create_app
from uamp_trio.transports import sse_events, uamp_ws
from uamp_trio.trust.auth import AnyOf, APIKeyAuthenticator

ISSUER = Issuer()

TIMEOUT = 20


async def answered(r: Reader, sid: str, agent: str = "demo") -> str:
    """Read ``sid``'s room events up to the agent's stored answer; its text."""
    while True:
        (event,) = await r.take(sid, 1)
        if event["type"] == "message.created" and event["sender"]["id"] == agent:
            return str(event["message"]["content"])


async def healthy(host: str) -> bool:
    async with httpx.AsyncClient() as client:
        return (await client.get(f"http://{host}/healthz")).status_code == 200


async def test_a_rule_of_2000_nested_groups_is_refused_naming_the_field() -> None:
    nested = "(" * 2000 + "a" + ")" * 2000
    with trio.fail_after(TIMEOUT):
        async with serving() as host, open_ws(f"ws://{host}/ws") as ws:
            r = Reader(ws)
            rules = {"respond": "rules", "rules": [{"match": nested, "agent": "demo"}]}
            bad = await r.join("eve", agent="demo", chat="nested", settings=rules)
            error = await r.take_any(bad)
            assert error["type"] == "session.error", error
            assert error["error"]["code"] == "invalid_request"
            assert error["error"]["details"] == {"field": "chat.rules[0].match"}
            assert "at most 256" in error["error"]["message"]
            # The process lives: the same socket opens another session in a room, and
            # 120 nested groups (inside the limits; RE2 compiles them) work.
            deep = "(" * 120 + "ping" + ")" * 120
            rules = {"respond": "rules", "rules": [{"match": deep, "agent": "demo"}]}
            ok = await r.join("ann", agent="demo", chat="fine", settings=rules)
            await r.expect(ok, [("presence.online", "demo")])
            await send(ws, type="input.text", text="ping", session_id=ok)
            assert await answered(r, ok) == "You said: ping"
            assert await healthy(host)


async def test_rules_python_re_would_backtrack_on_are_matched_in_linear_time() -> None:
    # (a+)+$ against 28 a's and a "!" took Python's re about a minute of the
    # event loop (it doubles per character); RE2 answers at once. The test
    # would end at its deadline on the old code.
    with trio.fail_after(TIMEOUT):
        async with serving() as host, open_ws(f"ws://{host}/ws") as ws:
            r = Reader(ws)
            rules = {"respond": "rules", "rules": [{"match": "(a+)+$", "agent": "demo"}]}
            one = await r.join("eve", agent="demo", chat="redos", settings=rules)
            await r.expect(one, [("presence.online", "demo")])
            text = "a" * 28 + "!"
            await send(ws, type="input.text", text=text, session_id=one)
            await r.expect(one, [("message.created", 1, "eve", text)])
            assert await healthy(host)
            await send(ws, type="input.text", text="AAA", session_id=one)  # case-insensitive
            assert await answered(r, one) == "You said: AAA"


async def test_rules_outside_re2_or_the_limits_are_refused_one_by_one() -> None:
    cases = [
        ({"match": "(?<=a)b", "agent": "demo"}, "chat.rules[0].match", "invalid perl operator"),
        ({"match": r"\p{L}{100}", "agent": "demo"}, "chat.rules[0].match", "pattern too large"),
        ({"match": 7, "agent": "demo"}, "chat.rules[0]", "needs match"),
    ]
    with trio.fail_after(TIMEOUT):
        async with serving([DemoAgent()]) as host, open_ws(f"ws://{host}/ws") as ws:
            r = Reader(ws)
            for n, (rule, field, reason) in enumerate(cases):
                settings = {"respond": "rules", "rules": [rule]}
                sid = await r.join("eve", agent="demo", chat=f"bad{n}", settings=settings)
                error = await r.take_any(sid)
                assert error["error"]["code"] == "invalid_request", error
                assert error["error"]["details"] == {"field": field}
                assert reason in error["error"]["message"]
            too_many = {"respond": "rules", "rules": [{"match": "x", "agent": "demo"}] * 65}
            sid = await r.join("eve", agent="demo", chat="many", settings=too_many)
            error = await r.take_any(sid)
            assert error["error"]["details"] == {"field": "chat.rules"}
            assert await healthy(host)


# --- a socket does not outlive its credential ---------------------------------------------


def _jwt_app(tmp_path: Path, agent: CountingAgent, **keys: str) -> App:
    auth: Any = ISSUER.authenticator(tmp_path, leeway=0)
    if keys:
        api = APIKeyAuthenticator([(name, key) for name, key in keys.items()])
        auth = AnyOf([auth, api])
    return App([agent], authenticator=auth)


async def test_after_expiry_every_room_action_is_refused_until_session_update(
    tmp_path: Path,
) -> None:
    agent = CountingAgent()
    app = _jwt_app(tmp_path, agent)
    app.mount(uamp_ws.mount)
    async with wire.serving(app) as server:
        base = f"ws://127.0.0.1:{server.port}/ws"
        # Made once the server listens, so its seconds go to the joins below.
        exp = int(time.time()) + 3
        short = ISSUER.token("alice", exp=exp)
        with trio.fail_after(TIMEOUT):
            async with (
                open_ws(f"{base}?token={short}") as a_ws,
                open_ws(f"{base}?token={ISSUER.token('bob')}") as b_ws,
            ):
                a, b = Reader(a_ws), Reader(b_ws)
                alice = await a.join(
                    "alice", agent="demo", chat="room", settings={"members": ["bob"]}
                )
                await a.expect(alice, [("presence.online", "demo")])
                bob = await b.join("bob", agent="demo", chat="room")
                await b.take(bob, 2)  # alice and demo online
                await a.expect(alice, [("presence.online", "bob")])
                await trio.sleep(max(0.0, exp + 0.3 - time.time()))
                actions: list[dict[str, Any]] = [
                    {"type": "input.text", "text": "@demo after expiry"},
                    {"type": "input.text", "text": "posted", "context": {"chat_id": "other"}},
                    {"type": "input.typing", "is_typing": True},
                    {"type": "message.read", "seq": 1},
                    {"type": "voice.invite", "to": "bob", "call_id": "call_1"},
                ]
                for action in actions:
                    await send(a_ws, session_id=alice, **action)
                    refused = await a.take_any(alice)
                    assert refused["type"] == "session.error", (action, refused)
                    assert refused["error"]["code"] == "unauthorized", (action, refused)
                # A new session on the socket (joining a room with its history) is refused.
                await send(
                    a_ws,
                    type="session.create",
                    uamp_version="1.0",
                    chat="room",
                    session={"modalities": ["text"]},
                )
                while (event := await wire.recv(a_ws))["type"] != "session.error":
                    assert event["type"] != "session.created", event
                assert event["error"]["code"] == "unauthorized"
                await b.quiet(bob)  # bob heard nothing of it
                # A fresh token for the same principal: everything works again.
                await send(
                    a_ws, type="session.update", session_id=alice, token=ISSUER.token("alice")
                )
                assert (await a.take_any(alice))["type"] == "session.updated"
                await send(a_ws, type="input.text", text="back", session_id=alice)
                await b.expect(bob, [("message.created", 1, "alice", "back")])
                again = await a.join("alice", agent="demo", chat="room")
                assert again
    assert agent.runs == []  # the mention never ran the agent


async def test_room_members_are_compared_by_scheme_and_id(tmp_path: Path) -> None:
    agent = CountingAgent()
    app = _jwt_app(tmp_path, agent, bob="key-bob", carol="key-carol")
    app.mount(uamp_ws.mount)
    async with wire.serving(app) as server:
        url = f"ws://127.0.0.1:{server.port}/ws"
        with trio.fail_after(TIMEOUT):
            async with open_ws(url) as ws:
                r = Reader(ws)
                settings = {"members": ["bob", "jwt:dave"]}  # bare: carol's scheme (api_key)
                carol = await r.join(
                    "carol", agent="demo", chat="secret", token="key-carol", settings=settings
                )
                await r.expect(carol, [("presence.online", "demo")])
                await send(ws, type="input.text", text="hush", session_id=carol)
                await r.expect(carol, [("message.created", 1, "carol", "hush")])
                # A JWT principal named bob is not the API key bob: a room of its own.
                jwt_bob = await r.join(
                    "bob", agent="demo", chat="secret", token=ISSUER.token("bob")
                )
                await r.expect(jwt_bob, [("presence.online", "demo")])
                await r.quiet(jwt_bob)
                key_bob = await r.join("bob", agent="demo", chat="secret", token="key-bob")
                got = await r.take(key_bob, 3)
                assert ("message.created", 1, "carol", "hush") in [summary(e) for e in got]
                dave = await r.join("dave", agent="demo", chat="secret", token=ISSUER.token("dave"))
                got = await r.take(dave, 4)
                assert ("message.created", 1, "carol", "hush") in [summary(e) for e in got]


async def test_http_sse_posts_carry_their_own_credential(tmp_path: Path) -> None:
    # Each POST is authenticated: the expired token is refused at the door, and
    # a fresh one for the same principal renews the session's credential.
    agent = CountingAgent()
    app = _jwt_app(tmp_path, agent)
    app.mount(sse_events.mount)
    fresh = {"authorization": f"Bearer {ISSUER.token('alice')}"}
    async with wire.serving(app) as server:
        base = f"http://127.0.0.1:{server.port}"
        # The short token is made once the server listens: under load, starting
        # it took long enough for a token made before to lapse before the create.
        exp = int(time.time()) + 3
        short = {"authorization": f"Bearer {ISSUER.token('alice', exp=exp)}"}
        with trio.fail_after(TIMEOUT):
            async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
                http.headers.update(short)
                created = await wire.post(http, wire.CREATE)
                sid = created.json()["session_id"]
                await trio.sleep(max(0.0, exp + 0.3 - time.time()))
                text = {"type": "input.text", "text": "late"}
                assert (await wire.post(http, text, sid)).status_code == 401
                http.headers.update(fresh)
                async with wire.open_stream(http, sid) as stream:
                    ok = await wire.post(http, [text, {"type": "response.create"}], sid)
                    assert ok.status_code == 200, ok.text
                    events = await stream.until("response.done")
                assert wire.texts(events) == "You said: late"
    assert [p.id for p in agent.runs] == ["alice"]


# --- what one principal can make a room keep ------------------------------------------------


async def test_chat_memory_is_bounded_by_size_rate_room_and_idle_expiry(serve_app: Any) -> None:
    server = await serve_app(
        create_app([DemoAgent()]),
        chat_max_message_bytes=1000,
        chat_principal_messages=5,
        chat_room_messages=3,
        chat_room_idle_timeout=0.3,
    )
    url = f"ws://127.0.0.1:{server.port}/ws"
    with trio.fail_after(TIMEOUT):
        async with open_ws(url) as ws:
            r = Reader(ws)
            eve = await r.join("eve", agent="demo", chat="pinned")
            await r.expect(eve, [("presence.online", "demo")])
            # A message over the size limit is refused, naming the field; nothing is kept.
            await send(ws, type="input.text", text="x" * (1024 * 1024), session_id=eve)
            refused = await r.take_any(eve)
            assert refused["error"]["code"] == "invalid_request", refused
            assert refused["error"]["details"] == {"field": "text"}
            # Five messages a minute per principal: the sixth is refused.
            for n in range(1, 6):
                await send(ws, type="input.text", text=f"m{n}", session_id=eve)
                await r.expect(eve, [("message.created", n, "eve", f"m{n}")])
            await send(ws, type="input.text", text="m6", session_id=eve)
            # UAMP 6.17: the rate_limit event first says nothing is left, then the refusal.
            notice = await r.take_any(eve)
            assert notice["type"] == "rate_limit" and notice["remaining"] == 0, notice
            assert notice["limit"] == 5 and notice["reset_at"] > time.time()
            refused = await r.take_any(eve)
            assert refused["error"]["code"] == "rate_limited", refused
            # The room keeps its newest three: a newcomer is sent those.
            late = await r.join("late", agent="demo", chat="pinned")
            got = [summary(e) for e in await r.take(late, 5)]
            kept = [s for s in got if s[0] == "message.created"]
            assert kept == [("message.created", n, "eve", f"m{n}") for n in (3, 4, 5)], got
        # Everyone left; idle past the timeout, the room is deleted with its messages.
        await trio.sleep(1.0)
        async with open_ws(url) as ws:
            r = Reader(ws)
            back = await r.join("eve", agent="demo", chat="pinned")
            await r.expect(back, [("presence.online", "demo")])
            await r.quiet(back)  # no history: a new room
