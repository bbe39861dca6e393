"""UAMP over HTTP+SSE from uamp_asgi under uvicorn: uamp's own SSE client, raw HTTP, resume."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import trio

import uamp_asgi
from tests._support.asgi import uvicorn_server
from tests._support.wire import CREATE, open_stream, post, texts
from uamp_asgi.responders import function_agent
from uamp_trio.client import ClientError, connect_sse
from uamp_trio.trust.auth import APIKeyAuthenticator

from .test_uamp_ws import Gate, echo

TIMEOUT = 30
GATE = Gate()


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    agents = [function_agent(echo), function_agent(GATE, name="gated")]
    with uvicorn_server(uamp_asgi.app(agents)) as url:
        yield url


@pytest.fixture(scope="module")
def guarded() -> Iterator[str]:
    config = uamp_asgi.Config(
        authenticator=APIKeyAuthenticator([("alice", "sk-a"), ("bob", "sk-b")]),
        sse_max_sessions=2,
    )
    with uvicorn_server(uamp_asgi.app(function_agent(echo), config=config)) as url:
        yield url


async def test_the_uamp_sse_client_talks_to_an_agent_by_path_and_by_name(base: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with connect_sse(base) as client:
            session = await client.create_session(agent="echo")
            assert (await session.ask("hi")).text == "You said: hi"
            assert (await session.ask("again")).text == "You said: again"
        async with connect_sse(base, agent_in_path=False) as client:
            session = await client.create_session(agent="echo")
            assert (await session.ask("x")).text == "You said: x"
            with pytest.raises(ClientError) as caught:
                await client.create_session(agent="nobody")
    assert caught.value.code == "agent_offline"  # UAMP 6.3's code, as uamp serve


async def test_bad_bodies_and_unknown_sessions(base: str) -> None:
    async with httpx.AsyncClient(base_url=base) as http:
        bad = await http.post("/events", content=b"[]")
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_event"
        unnamed = await post(http, {"type": "response.create"})
        assert unnamed.status_code == 400
        assert unnamed.json()["error"]["code"] == "session_id_required"
        missing = await post(http, {"type": "response.create"}, "nope")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_session"
        # The events before a refused one were taken: the body says how many.
        sid = (await post(http, CREATE, path="/agents/echo/events")).json()["session_id"]
        mixed = await post(
            http, [{"type": "input.text", "text": "a"}, {"type": "input.text", "text": 5}], sid
        )
        assert mixed.status_code == 400 and mixed.json()["accepted"] == 1
        again = await post(http, {**CREATE, "session_id": sid}, path="/agents/echo/events")
        assert again.status_code == 400
        assert again.json()["error"]["code"] == "duplicate_session"


async def test_last_event_id_resumes_a_stream_that_broke_mid_response(base: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=f"{base}/agents/gated") as http:
            opened = await post(http, CREATE)
            sid = opened.headers["x-session-id"]
            assert opened.json() == {"session_id": sid, "accepted": 1}
            async with open_stream(http, sid) as events:
                head = await events.until("capabilities")
                ask = [{"type": "input.text", "text": "count"}, {"type": "response.create"}]
                assert (await post(http, ask, sid)).json()["accepted"] == 2
                seen = []
                while len([e for e in seen if e["type"] == "response.delta"]) < 3:
                    seen.append(await events.next())
                assert events.ids[: len(head)] == [e["event_id"] for e in head]
            # The stream broke; the turn goes on without it.
            await trio.to_thread.run_sync(GATE.paused.wait)
            GATE.gate.set()
            last = seen[-1]["event_id"]
            async with open_stream(http, sid, **{"last-event-id": last}) as events:
                rest = await events.until("response.done")
            assert texts(seen) + texts(rest) == "".join(f"d{i} " for i in range(GATE.count))
            assert rest[-1]["response"]["status"] == "completed"
            # A stream without Last-Event-ID gets only what no stream took yet.
            assert (await post(http, {"type": "ping"}, sid)).status_code == 200
            async with open_stream(http, sid) as events:
                pong = await events.next()
            assert pong["type"] == "pong"
            gone = await http.get(
                "/events/stream", headers={"x-session-id": sid, "last-event-id": "evt_nope"}
            )
            assert gone.status_code == 400 and gone.json()["error"]["code"] == "unknown_event"


async def test_sessions_are_their_owners_and_capped_per_principal(guarded: str) -> None:
    alice = {"authorization": "Bearer sk-a"}
    bob = {"authorization": "Bearer sk-b"}
    async with (
        httpx.AsyncClient(base_url=guarded, headers=alice) as a,
        httpx.AsyncClient(base_url=guarded, headers=bob) as b,
        httpx.AsyncClient(base_url=guarded) as nobody,
    ):
        assert (await post(nobody, CREATE)).status_code == 401
        sid = (await post(a, CREATE)).json()["session_id"]
        # Bob naming Alice's session is answered as a session that never existed.
        for client, name in ((b, sid), (a, "never")):
            theirs = await post(client, {"type": "response.create"}, name)
            assert theirs.status_code == 404
            stream = await client.get("/events/stream", headers={"x-session-id": name})
            assert stream.status_code == 404
            assert theirs.json()["error"] == stream.json()["error"] | {
                "message": theirs.json()["error"]["message"]
            }
        assert (await post(a, CREATE)).status_code == 200
        over = await post(a, CREATE)
        assert over.status_code == 429 and over.json()["error"]["code"] == "too_many_sessions"
        assert (await post(b, CREATE)).status_code == 200  # Alice's cap is hers only
        # Ending a session frees its place.
        assert (await post(a, {"type": "session.end"}, sid)).status_code == 200
        assert (await post(a, CREATE)).status_code == 200
