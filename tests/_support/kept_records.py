"""One principal's resumable UAMP sessions, filled and left: what their records keep.

A session's record in the event log (docs/resume.md) keeps its conversation
for a resume, after the socket is gone and the live budget
(:class:`uamp_proto.history.SessionHistories`) no longer counts it. Both
servers' tests run these scenarios (:data:`SCENARIOS`) against their memory
log: sessions filled near the core's per-session bound
(tests/_support/kept_history.py), each on its own socket, then detached (the
socket closed) or ended (``session.end``).
"""

from __future__ import annotations

import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.kept_history import ALICE, BIG, FILLED, fill, turn
from tests._support.wire import create_session, resume_session, send, until
from uamp_proto.history import MAX_OWNER_HISTORY_BYTES, weight
from uamp_proto.principal import ANONYMOUS, Principal
from uamp_stores.event_log import MemoryEventLog

#: Sessions one principal fills and leaves: 8 x 3.6 MiB, about 29 MB of conversation.
SESSIONS = 8


async def records_weight(log: MemoryEventLog, owner: Principal, sids: list[str]) -> int:
    """The conversation the records of ``owner`` 's sessions ``sids`` keep (ended ones too)."""
    total = 0
    for sid in sids:
        record = await log._load((owner.key, sid))
        if record is not None:
            total += sum(weight(m) for m in record.history)
    return total


async def filled_and_left(
    url: str, *, headers: list[tuple[str, str]] | None = None
) -> tuple[str, str]:
    """One session filled with :data:`BIG` turns on its own socket, then the socket closed.

    Returns the session id and the ``event_id`` of its last event (to resume after).
    """
    async with open_ws(url, extra_headers=headers or []) as ws:
        sid = await create_session(ws)
        await fill(ws, sid)
        await send(ws, type="input.text", session_id=sid, text="last")
        await send(ws, type="response.create", session_id=sid)
        done = (await until(ws, "response.done"))[-1]
    return sid, done["event_id"]


async def _settled(log: MemoryEventLog, owner: Principal, sid: str) -> None:
    """Wait until ``sid`` 's socket is gone on the server (its log released)."""
    while log.writing((owner.key, sid)):
        await trio.sleep(0.01)


async def detached_records_within_budget(url: str, log: MemoryEventLog) -> None:
    """Eight filled sessions left by one principal keep at most its budget in records.

    Before the bound, the records kept all of it (about 29 MB) while the live
    budget read 0. The newest resume with their conversation; the oldest
    lost theirs, and a resume of one says ``beyond_retention``.
    """
    left = [await filled_and_left(url) for _ in range(SESSIONS)]
    sids = [sid for sid, _ in left]
    for sid in sids:
        await _settled(log, ANONYMOUS, sid)
    kept = await records_weight(log, ANONYMOUS, sids)
    assert kept <= MAX_OWNER_HISTORY_BYTES, kept  # ~29 MB before the bound
    assert kept >= 3 * FILLED  # the newest keep theirs
    async with open_ws(url) as ws:
        sid, after = left[-1]
        resumed = await resume_session(ws, sid, after)
        assert resumed["type"] == "session.created", resumed
        # Three turns of "n " + BIG, three "ok", then "last" and its "ok".
        assert await turn(ws, sid, "history") == f"kept {FILLED + 6 + 6 + 4 + 2}"
        sid, after = left[0]
        refused = await resume_session(ws, sid, after)
        assert refused["type"] == "session.error", refused
        assert refused["error"]["code"] == "beyond_retention", refused


async def ended_records_keep_no_conversation(url: str, log: MemoryEventLog) -> None:
    """Sessions ended by ``session.end`` cannot be resumed: their records keep no conversation."""
    async with open_ws(url) as ws:
        sids = []
        for _ in range(SESSIONS):
            sid = await create_session(ws)
            await fill(ws, sid)
            await send(ws, type="session.end", session_id=sid)
            sids.append(sid)
        await send(ws, type="ping", event_id="after-the-ends")
        await until(ws, "pong")
        assert await records_weight(log, ANONYMOUS, sids) == 0  # ~29 MB before
    async with open_ws(url) as ws:
        refused = await resume_session(ws, sids[-1], "evt_any")
        assert refused["type"] == "session.error", refused
        assert refused["error"]["code"] == "session_expired", refused


async def another_principal_records_untouched(url: str, log: MemoryEventLog) -> None:
    """Bob's record, the least recently changed of the log, keeps his conversation past alice's.

    The server knows the API keys ``key-a`` (alice) and ``key-b`` (bob).
    """
    bob = Principal(id="bob", scheme="api_key")
    his, after = await filled_and_left(url, headers=[("Authorization", "Bearer key-b")])
    mine = [
        (await filled_and_left(url, headers=[("Authorization", "Bearer key-a")]))[0]
        for _ in range(SESSIONS)
    ]
    for sid in mine:
        await _settled(log, ALICE, sid)
    assert await records_weight(log, ALICE, mine) <= MAX_OWNER_HISTORY_BYTES
    assert await records_weight(log, bob, [his]) >= FILLED
    async with open_ws(url, extra_headers=[("Authorization", "Bearer key-b")]) as ws:
        resumed = await resume_session(ws, his, after)
        assert resumed["type"] == "session.created", resumed
        assert await turn(ws, his, "history") == f"kept {FILLED + 6 + 6 + 4 + 2}"


#: Every scenario, for the servers' tests to run each.
SCENARIOS = (
    detached_records_within_budget,
    ended_records_keep_no_conversation,
    another_principal_records_untouched,
)

__all__ = ["BIG", "SCENARIOS", "records_weight"]
