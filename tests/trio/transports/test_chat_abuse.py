"""Chat rooms in front of strangers (issue 29): answer rules, failures, credentials, memory.

Every test runs a real server on 127.0.0.1 and speaks UAMP over real
WebSockets. Each reproduces an abuse that hurt the server before (a rule that
stopped the process, a rule that froze the event loop, ...) and checks that
now only the abuser's own request is refused and everyone else is served.
"""

from __future__ import annotations

import httpx
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.wire import send
from tests.trio.transports.test_chat_rooms import Reader, serving
from uamp_trio import DemoAgent

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
