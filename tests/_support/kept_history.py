"""One principal's UAMP sessions filled with conversation, over real WebSockets.

Both servers' tests of the per-principal history budget
(:class:`uamp_proto.history.SessionHistories`) run the same scenarios
(:data:`SCENARIOS`): turns of :data:`BIG` fill a session near the core's
per-session bound, and a turn saying ``history`` asks the agent
(:class:`Kept`) how many characters of conversation it was given -- what the
server kept for that session.
"""

from __future__ import annotations

import httpx
import trio
from trio_websocket import WebSocketConnection
from trio_websocket import open_websocket_url as open_ws

from tests._support.agents import TestAgent
from tests._support.wire import create_session, resume_session, send, texts, until
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.history import MAX_OWNER_HISTORY_BYTES, SessionHistories
from uamp_proto.principal import ANONYMOUS, Principal
from uamp_proto.responder import Emit, TurnRequest

#: One turn's text: three fill a session to about 3.6 MiB (the core keeps 4 MiB).
BIG = "x" * (1200 * 1024)
#: What three turns of :data:`BIG` leave in a session, at least.
FILLED = 3 * len(BIG)
#: The principal of the API key ``key-a`` (``APIKeyAuthenticator``).
ALICE = Principal(id="alice", scheme="api_key")


class Kept(TestAgent):
    """Answers ``ok``; to ``history``, ``kept N``: the characters of conversation it was given."""

    name = "kept"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        if request.messages and request.messages[-1].text == "history":
            kept = sum(len(m.text) for m in request.messages[:-1])
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"kept {kept}")))
            return
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))


async def turn(ws: WebSocketConnection, sid: str, text: str) -> str:
    """One turn on session ``sid``: its answer's text."""
    await send(ws, type="input.text", session_id=sid, text=text)
    await send(ws, type="response.create", session_id=sid)
    events = await until(ws, "response.done")
    assert all(e.get("session_id") == sid for e in events if e["type"].startswith("response."))
    return texts(events)


async def fill(ws: WebSocketConnection, sid: str) -> None:
    """Three turns of :data:`BIG` on session ``sid``."""
    for n in range(3):
        assert await turn(ws, sid, f"{n} {BIG}") == "ok"


async def kept(ws: WebSocketConnection, sid: str) -> int:
    """How many characters of conversation session ``sid`` keeps (a turn asks the agent)."""
    answer = await turn(ws, sid, "history")
    assert answer.startswith("kept "), answer
    return int(answer.split()[1])


async def last_turn(ws: WebSocketConnection, sid: str) -> str:
    """One more turn (``last``) on ``sid``: the ``event_id`` of its ``response.done``,
    where a resume starts from."""
    await send(ws, type="input.text", session_id=sid, text="last")
    await send(ws, type="response.create", session_id=sid)
    done: str = (await until(ws, "response.done"))[-1]["event_id"]
    return done


# --- the scenarios both servers' tests run (``url``: the agent's UAMP WebSocket) ---------


def _as(key: str) -> list[tuple[str, str]]:
    return [("Authorization", f"Bearer {key}")]


async def _settled(histories: SessionHistories, owner: Principal, total: int) -> None:
    """Wait until ``total`` bytes are counted for ``owner`` (servers close sockets in tasks)."""
    while histories.total(owner.key) != total:
        await trio.sleep(0.01)


async def spread_over_two_sockets(url: str, histories: SessionHistories) -> None:
    """Six sessions of ~3.6 MiB over two sockets, one principal: at most the budget is kept."""
    async with open_ws(url) as one, open_ws(url) as two:
        sessions = []
        for ws in (one, two, one, two, one, two):  # 21.6 MiB in all
            sid = await create_session(ws)
            await fill(ws, sid)
            sessions.append((ws, sid))
        seen = [await kept(ws, sid) for ws, sid in sessions]
        assert sum(seen) <= MAX_OWNER_HISTORY_BYTES, seen  # 21.6 MiB kept before the budget
        assert seen[0] == 0  # the least recently used started afresh
        assert seen[-1] >= FILLED  # the newest kept its own
        assert histories.total(ANONYMOUS.key) <= MAX_OWNER_HISTORY_BYTES
        await fill(*sessions[0])  # a trimmed session goes on, and keeps again
        assert await kept(*sessions[0]) >= FILLED


async def another_principal_untouched(url: str, histories: SessionHistories) -> None:
    """Bob's session, the least recently used of the server, survives alice's six.

    The server knows the API keys ``key-a`` (alice) and ``key-b`` (bob).
    """
    async with open_ws(url, extra_headers=_as("key-b")) as bob:
        his = await create_session(bob)
        await fill(bob, his)
        async with open_ws(url, extra_headers=_as("key-a")) as alice:
            mine = [await create_session(alice) for _ in range(6)]
            for sid in mine:
                await fill(alice, sid)
            assert await kept(alice, mine[0]) == 0
            assert histories.total(ALICE.key) <= MAX_OWNER_HISTORY_BYTES
        assert await kept(bob, his) >= FILLED  # alice's sessions never cost bob his


async def ended_and_closed_give_back(url: str, histories: SessionHistories) -> None:
    """Ended sessions, then a closed socket, leave nothing counted (nor remembered)."""
    async with open_ws(url) as ws:
        sids = [await create_session(ws) for _ in range(4)]
        for sid in sids:
            await fill(ws, sid)
        four = histories.total(ANONYMOUS.key)
        assert four >= 4 * FILLED
        for sid in sids[:2]:
            await send(ws, type="session.end", session_id=sid)
        await send(ws, type="ping", event_id="after-the-ends")
        await until(ws, "pong")
        assert histories.total(ANONYMOUS.key) < four - 2 * FILLED
        # Two new full sessions fit beside the two left: nothing of theirs is trimmed.
        for sid in [await create_session(ws) for _ in range(2)]:
            await fill(ws, sid)
        assert min([await kept(ws, sid) for sid in sids[2:]]) >= FILLED
    await _settled(histories, ANONYMOUS, 0)
    assert not histories._owners


async def resumed_is_counted(url: str, histories: SessionHistories) -> None:
    """A session resumed on a new socket counts the conversation its record gave back."""
    async with open_ws(url) as ws:
        sid = await create_session(ws)
        await fill(ws, sid)
        done = await last_turn(ws, sid)
    await _settled(histories, ANONYMOUS, 0)
    async with open_ws(url) as ws:
        resumed = await resume_session(ws, sid, done)
        assert resumed["type"] == "session.created", resumed
        # Three turns of "n " + BIG, three "ok", then "last" and its "ok".
        assert await turn(ws, sid, "history") == f"kept {FILLED + 6 + 6 + 4 + 2}"
        assert histories.total(ANONYMOUS.key) >= FILLED


async def resumed_beside_its_socket(url: str, histories: SessionHistories) -> None:
    """A session resumed on a second socket while its first is open is counted once.

    Four filled sessions fit the budget; counting the resumed one twice (its
    old socket's copy and the new one's) would pass it and empty the least
    recently used session -- the resumed one itself, whose old copy, emptied,
    would be written over its record before the new socket took it on.
    """
    async with open_ws(url) as one:
        sids = [await create_session(one) for _ in range(4)]
        await fill(one, sids[0])
        done = await last_turn(one, sids[0])
        for sid in sids[1:]:  # about 14.8 MiB in all: within the budget
            await fill(one, sid)
        async with open_ws(url) as two:
            resumed = await resume_session(two, sids[0], done)
            assert resumed["type"] == "session.created", resumed
            answer = await turn(two, sids[0], "history")
            assert answer == f"kept {FILLED + 6 + 6 + 4 + 2}", answer
            for sid in sids[1:]:  # nothing of the others was trimmed for it either
                assert await kept(one, sid) >= FILLED
            assert histories.total(ANONYMOUS.key) <= MAX_OWNER_HISTORY_BYTES


async def resumed_copy_ends(url: str, histories: SessionHistories) -> None:
    """The copy a resume leaves on the old socket ends (``session.end`` ``resumed``).

    Left open, both copies would take turns and count their conversations:
    the principal's budget would hold the session twice.
    """
    async with open_ws(url) as one:
        sid = await create_session(one)
        await fill(one, sid)
        done = await last_turn(one, sid)
        once = histories.total(ANONYMOUS.key)
        async with open_ws(url) as two:
            resumed = await resume_session(two, sid, done)
            assert resumed["type"] == "session.created", resumed
            ended = (await until(one, "session.end"))[-1]
            assert (ended["session_id"], ended.get("reason")) == (sid, "resumed"), ended
            assert await kept(two, sid) >= FILLED
            # The new copy alone is counted (its conversation, one turn longer),
            # not both: that would be over twice FILLED.
            assert FILLED <= histories.total(ANONYMOUS.key) < once + 1024, (
                once,
                histories.total(ANONYMOUS.key),
            )


#: Every scenario, for the servers' tests to run each.
SCENARIOS = (
    spread_over_two_sockets,
    another_principal_untouched,
    ended_and_closed_give_back,
    resumed_is_counted,
    resumed_beside_its_socket,
    resumed_copy_ends,
)


# --- the budget's size: the server's configuration alone ----------------------------------

#: A small budget (each server's test configures it), and a turn's text: two turns fit it,
#: three do not.
SMALL_BUDGET = 10_000
_TEXT = "x" * 4000


async def budget_whoever_reports_last(base: str, histories: SessionHistories, last: str) -> None:
    """A WebSocket and an HTTP+SSE connection of one principal report in either order
    (``last``: ``"sse"`` or ``"websocket"``): the budget enforced is :data:`SMALL_BUDGET`,
    the server's, whichever connection reported last. ``base``: the server's URL."""
    url = base.replace("http", "ws", 1) + "/agents/kept/uamp"
    sse = [{"type": "session.create"}, {"type": "input.text", "text": _TEXT}]

    async def over_sse(http: httpx.AsyncClient) -> None:
        reporters = len(histories._owners)
        made = await http.post("/agents/kept/events", json=[*sse, {"type": "response.create"}])
        assert made.status_code == 200, made.text
        while len(histories._owners) == reporters:  # its turn runs after the answer
            await trio.sleep(0.01)

    async with open_ws(url) as ws, httpx.AsyncClient(base_url=base) as http:
        if last == "websocket":
            await over_sse(http)
        sids = [await create_session(ws) for _ in range(2)]
        for sid in sids:
            assert await turn(ws, sid, _TEXT) == "ok"
        if last == "sse":
            await over_sse(http)
        assert 2 * len(_TEXT) < histories.total(ANONYMOUS.key) <= SMALL_BUDGET
        assert histories.budget.max_bytes == SMALL_BUDGET
        # The least recently used session made room: the WebSocket's first when the
        # HTTP+SSE turn came last, else the HTTP+SSE session.
        first = await kept(ws, sids[0])
        assert first == 0 if last == "sse" else first > len(_TEXT)
