"""The composition root creates the shared state and every transport uses it.

One :class:`~uamp_trio.stores.Stores` per app: an A2A task, an ACP session
and an HTTP+SSE session started over real sockets land in the stores the app
was given, and two apps share none of them.
"""

from __future__ import annotations

from typing import Any

import httpx
import trio

from tests._support.rpc import a2a_message, rpc
from tests._support.wire import CREATE, post
from uamp_proto.principal import ANONYMOUS, Principal
from uamp_trio.app import App, create_app
from uamp_trio.demo import DemoAgent
from uamp_trio.stores import MemoryTaskStore, SessionTracker, Stores
from uamp_trio.transports import a2a, acp, sse_events

TIMEOUT = 15


async def test_every_transport_keeps_its_state_in_the_stores_the_app_was_given(
    serve_app: Any,
) -> None:
    stores = Stores(a2a_tasks=MemoryTaskStore(max_tasks=5))
    app = create_app([DemoAgent()], stores=stores)
    assert app.stores is stores
    server = await serve_app(app)
    message = a2a_message("hi")
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url) as http:
            task = (
                await http.post("/agents/demo/a2a", json=rpc("message/send", {"message": message}))
            ).json()
            acp = (
                await http.post("/agents/demo/acp", json=rpc("session/new", {"cwd": "/tmp"}))
            ).json()
            sse = await post(http, CREATE, path="/agents/demo/events")
    assert [t.id for t in stores.a2a_tasks] == [task["result"]["id"]]
    assert list(stores.acp_sessions.sessions) == [acp["result"]["sessionId"]]
    assert stores.http_sessions.get(ANONYMOUS, sse.headers["x-session-id"]) is not None


def test_each_app_creates_its_own_stores_and_its_transports_take_them() -> None:
    first, second = App([DemoAgent()]), App([DemoAgent()])
    assert first.stores.a2a_tasks is not second.stores.a2a_tasks
    assert first.stores.acp_sessions is not second.stores.acp_sessions
    assert first.stores.http_sessions is not second.stores.http_sessions
    assert a2a.A2ATransport(first).store is first.stores.a2a_tasks
    assert acp.AcpTransport(second).store is second.stores.acp_sessions
    assert sse_events.SSEEventsTransport(second).sessions is second.stores.http_sessions


def test_the_session_tracker_finds_a_session_only_for_its_owner_and_never_replaces() -> None:
    alice, bob = Principal(id="alice", scheme="jwt"), Principal(id="bob", scheme="jwt")
    tracker: SessionTracker[str] = SessionTracker()
    assert tracker.add(alice, "s1", "alice's")
    assert tracker.add(bob, "s1", "bob's")  # same id, another owner: a separate session
    assert not tracker.add(alice, "s1", "again")
    assert (tracker.get(alice, "s1"), tracker.get(bob, "s1"), len(tracker)) == (
        "alice's",
        "bob's",
        2,
    )
    tracker.discard(alice, "s1", "not the tracked one")
    assert tracker.get(alice, "s1") == "alice's"
    tracker.discard(alice, "s1", "alice's")
    assert (tracker.get(alice, "s1"), len(tracker)) == (None, 1)
