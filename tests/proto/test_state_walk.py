"""The whole rule table, walked through a real client/server pair.

Every (sender, session state, response slot state, event type) the
connection can be in: a legal move (session table, response table for the
events it constrains, the payment machine for payment events) moves both
sides to the states the tables give; an illegal one raises
``LocalProtocolError`` on the sender and ``RemoteProtocolError`` on the
receiver, with the rule's code, changes nothing, and -- when the client is at
fault -- carries (and on the server, queues) the same ``session.error`` reply.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from uamp_proto import _state as tables
from uamp_proto import events as ev
from uamp_proto._state import ResponseState, Role, SessionState
from uamp_proto.connection import Connection
from uamp_proto.errors import LocalProtocolError, RemoteProtocolError
from uamp_proto.payment import PaymentNegotiation
from uamp_proto.voice import CALL_TRANSITIONS, CallState

from .pair import Pair
from .samples import MINIMAL, sample

_S, _R = SessionState, ResponseState


def _setup(session: SessionState, slot: ResponseState, live: int) -> Pair:
    """A pair whose session ``s1`` (or connection level) is in the given states."""
    pair = Pair()
    if session is _S.IDLE:
        for n in range(live):
            pair.open(session_id=f"s{n + 1}")
        return pair
    if session is _S.CREATING:
        pair.to_server(pair.client.create_session(session_id="s1"))
    else:
        pair.open(session_id="s1")
    if session is _S.ENDED:
        pair.client_sends(ev.SessionEnd(session_id="s1"))
        return pair
    if slot is not _R.IDLE:
        pair.client_sends(ev.InputText(session_id="s1", text="x"))
        pair.client_sends(ev.ResponseCreate(session_id="s1"))
    if slot is _R.IN_PROGRESS:
        tracker = pair.server.session("s1").response
        assert tracker is not None
        pair.server_sends(ev.ResponseCreated(session_id="s1", response_id=tracker.response_id))
        pair.server_sends(ev.ToolCall(session_id="s1", call_id="call_1", name="f", arguments="{}"))
    return pair


def _cases() -> list[tuple[Role, SessionState, ResponseState, int, str]]:
    cases = []
    for role in Role:
        types = sorted(tables.CLIENT_EVENTS if role is Role.CLIENT else tables.SERVER_EVENTS)
        for session in SessionState:
            assert session is _S.ENDED or (role, session) in tables.SESSION_TRANSITIONS
            slots: list[ResponseState] = [_R.IDLE]
            if session is _S.ACTIVE:
                slots = [_R.IDLE, _R.REQUESTED, _R.IN_PROGRESS]
            elif session is _S.CREATING:
                slots = [_R.IDLE, _R.REQUESTED]  # a client pipelines response.create
            for slot in slots:
                assert (role, slot) in tables.RESPONSE_TRANSITIONS
                for live in (0, 2) if session is _S.IDLE else (1,):
                    cases.extend((role, session, slot, live, t) for t in types)
    return cases


def _expected(
    role: Role, session: SessionState, slot: ResponseState, live: int, etype: str
) -> tuple[SessionState | None, ResponseState | None, str | None]:
    """(session state after, slot state after, refusal code), restated from the rules."""
    if etype == "session.create":
        # Always a new session, from the connection level; only its id can clash.
        if session is _S.IDLE:
            return _S.CREATING, None, None
        return None, None, "duplicate_session"
    if etype == "session.created" and session in (_S.IDLE, _S.ENDED):
        return None, None, "unknown_session"  # it answers no session being created
    if session is _S.ENDED:
        return None, None, "session_ended"
    after = tables.SESSION_TRANSITIONS[(role, session)].get(etype)
    if after is None:
        if session is _S.IDLE:
            return None, None, "no_session" if live == 0 else "session_id_required"
        return None, None, "invalid_event"
    if session is _S.IDLE:
        return after, None, None  # connection level: no response slot
    slot_after = slot
    if etype in tables.RESPONSE_EVENTS:
        moved = tables.RESPONSE_TRANSITIONS[(role, slot)].get(etype)
        if moved is None:
            code = {"response.create": "response_in_progress", "tool.result": "invalid_tool_result"}
            return None, None, code.get(etype, "invalid_event")
        slot_after = _R.IDLE if moved in tables.TERMINAL_RESPONSE_STATES else moved
    if etype.startswith("payment.") and not PaymentNegotiation(None).can_apply(sample(etype)):
        return None, None, "invalid_event"
    if etype.startswith("voice.") and etype not in CALL_TRANSITIONS[CallState.IDLE]:
        return None, None, "invalid_event"  # no call to accept, decline or end
    return after, slot_after, None


def _snapshot(conn: Connection) -> dict[str, tuple[SessionState, ResponseState]]:
    return {sid: (s.state, s.phase) for sid, s in conn.sessions.items()}


@pytest.mark.parametrize(("role", "session", "slot", "live", "etype"), _cases())
def test_every_move_of_the_table(
    role: Role, session: SessionState, slot: ResponseState, live: int, etype: str
) -> None:
    pair = _setup(session, slot, live)
    sender, receiver = (
        (pair.client, pair.server) if role is Role.CLIENT else (pair.server, pair.client)
    )
    fields: dict[str, Any] = {} if session is _S.IDLE else {"session_id": "s1"}
    if etype == "response.created":
        fields["response_id"] = "resp_new"
    event = sample(etype, **fields)
    session_after, slot_after, code = _expected(role, session, slot, live, etype)

    if code is None:
        count = len(pair.server.sessions)
        receiver.receive(sender.send(event))
        receiver.next_event()
        for conn in (pair.client, pair.server):
            if session is _S.IDLE:
                if etype == "session.create":
                    assert len(conn.sessions) == count + 1
                    assert all(
                        s.state is session_after
                        for s in conn.sessions.values()
                        if s.id not in {f"s{n + 1}" for n in range(live)}
                    )
                else:
                    assert len(conn.sessions) == count
            elif session_after is _S.ENDED:
                assert "s1" not in conn.sessions
            else:
                assert conn.session("s1").state is session_after
                assert conn.session("s1").phase is slot_after
        return

    before = (_snapshot(pair.client), _snapshot(pair.server))
    with pytest.raises(LocalProtocolError) as local:
        sender.send(event)
    assert local.value.code == code
    receiver.receive(orjson.dumps({"type": etype, **MINIMAL[etype], **fields}))
    with pytest.raises(RemoteProtocolError) as remote:
        receiver.next_event()
    # A client matches session.created to its pending session.create, not by
    # id: with none pending, whatever the server thought, it answers nothing.
    assert remote.value.code == ("unknown_session" if etype == "session.created" else code)
    owed = receiver.data_to_send()
    if role is Role.CLIENT:
        # The client broke the rule: the server answers with session.error
        # naming the event, and the client's own refusal carries the same.
        reply = remote.value.reply
        assert isinstance(reply, ev.SessionErrorEvent)
        assert reply.error.code == code
        assert reply.error.details is not None and reply.error.details["event_type"] == etype
        assert local.value.reply == reply
        assert len(owed) == 1 and orjson.loads(owed[0])["error"]["code"] == code
    else:
        # A client has no error event to answer a server with.
        assert local.value.reply is None and remote.value.reply is None and owed == []
    assert (_snapshot(pair.client), _snapshot(pair.server)) == before
