"""All of one principal's UAMP sessions keep one history budget under ``uamp serve``.

Each session's kept conversation is bounded in the core (4 MiB), but one
principal may hold 64 sessions per connection on as many connections as the
server admits. The app keeps one :class:`uamp_proto.history.SessionHistories`
over all of them (``SessionLimits.max_history_bytes_per_principal``, 16 MiB):
past it, that principal's least recently used sessions start afresh, never
another principal's; ended sessions and closed connections give their bytes
back. Real sockets, the real server, trio-websocket as the client.
"""

from __future__ import annotations

from typing import Any

import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.kept_history import FILLED, Kept, fill, kept, turn
from tests._support.wire import create_session, resume_session, send, until
from uamp_proto.history import MAX_OWNER_HISTORY_BYTES
from uamp_proto.principal import ANONYMOUS, Principal
from uamp_trio.app import create_app
from uamp_trio.trust.auth import APIKeyAuthenticator

ALICE = Principal(id="alice", scheme="api_key")
BOB = Principal(id="bob", scheme="api_key")


def _url(server: Any) -> str:
    return server.url.replace("http", "ws", 1) + "/agents/kept/uamp"


def _as(key: str) -> list[tuple[str, str]]:
    return [("Authorization", f"Bearer {key}")]


async def _settled(app: Any, owner: Principal, total: int) -> None:
    """Wait until the server counts ``total`` bytes for ``owner`` (sockets close in tasks)."""
    while app.uamp_histories.total(owner.key) != total:
        await trio.sleep(0.01)


async def test_one_principals_sessions_over_two_sockets_keep_at_most_the_budget(
    serve_app: Any,
) -> None:
    app = create_app([Kept()])
    server = await serve_app(app)
    with trio.fail_after(120):
        async with open_ws(_url(server)) as one, open_ws(_url(server)) as two:
            sessions = []
            for ws in (one, two, one, two, one, two):  # six sessions of ~3.6 MiB: 21.6 MiB
                sid = await create_session(ws)
                await fill(ws, sid)
                sessions.append((ws, sid))
            seen = [await kept(ws, sid) for ws, sid in sessions]
            assert sum(seen) <= MAX_OWNER_HISTORY_BYTES, seen  # 21.6 MiB kept before the budget
            assert seen[0] == 0  # the least recently used started afresh
            assert seen[-1] >= FILLED  # the newest kept its own
            assert app.uamp_histories.total(ANONYMOUS.key) <= MAX_OWNER_HISTORY_BYTES
            # A session whose history was trimmed goes on: its next turn keeps again.
            await fill(*sessions[0])
            assert await kept(*sessions[0]) >= FILLED


async def test_another_principals_history_is_untouched(serve_app: Any) -> None:
    keys = APIKeyAuthenticator([("alice", "key-a"), ("bob", "key-b")])
    app = create_app([Kept()], authenticator=keys)
    server = await serve_app(app)
    with trio.fail_after(120):
        async with open_ws(_url(server), extra_headers=_as("key-b")) as bob:
            his = await create_session(bob)
            await fill(bob, his)  # the least recently used session of the server
            async with open_ws(_url(server), extra_headers=_as("key-a")) as alice:
                mine = [await create_session(alice) for _ in range(6)]
                for sid in mine:
                    await fill(alice, sid)
                assert await kept(alice, mine[0]) == 0
                assert app.uamp_histories.total(ALICE.key) <= MAX_OWNER_HISTORY_BYTES
            assert await kept(bob, his) >= FILLED  # alice's sessions never cost bob his


async def test_ended_sessions_and_closed_sockets_give_their_bytes_back(serve_app: Any) -> None:
    app = create_app([Kept()])
    server = await serve_app(app)
    owner = ANONYMOUS
    with trio.fail_after(120):
        async with open_ws(_url(server)) as ws:
            sids = [await create_session(ws) for _ in range(4)]
            for sid in sids:
                await fill(ws, sid)
            four = app.uamp_histories.total(owner.key)
            assert four >= 4 * FILLED
            for sid in sids[:2]:
                await send(ws, type="session.end", session_id=sid)
            await send(ws, type="ping", event_id="after-the-ends")
            await until(ws, "pong")
            assert app.uamp_histories.total(owner.key) < four - 2 * FILLED
            # Two new full sessions fit beside the two left: nothing of theirs is trimmed.
            for sid in [await create_session(ws) for _ in range(2)]:
                await fill(ws, sid)
            assert min([await kept(ws, sid) for sid in sids[2:]]) >= FILLED
        await _settled(app, owner, 0)  # the socket closed: nothing is counted any more
        assert not app.uamp_histories._owners  # nor any session remembered


async def test_a_resumed_session_counts_what_its_record_gave_back(serve_app: Any) -> None:
    app = create_app([Kept()])
    server = await serve_app(app)
    with trio.fail_after(60):
        async with open_ws(_url(server)) as ws:
            sid = await create_session(ws)
            await fill(ws, sid)
            await send(ws, type="input.text", session_id=sid, text="last")
            await send(ws, type="response.create", session_id=sid)
            done = (await until(ws, "response.done"))[-1]
        await _settled(app, ANONYMOUS, 0)
        async with open_ws(_url(server)) as ws:
            resumed = await resume_session(ws, sid, done["event_id"])
            assert resumed["type"] == "session.created", resumed
            # Three turns of "n " + BIG, three "ok", then "last" and its "ok".
            assert await turn(ws, sid, "history") == f"kept {FILLED + 6 + 6 + 4 + 2}"
            assert app.uamp_histories.total(ANONYMOUS.key) >= FILLED
