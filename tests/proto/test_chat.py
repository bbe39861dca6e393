"""Chat room decisions (UAMP 6.18, 7.1): roster, typing throttle, read state, who answers."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.chat import (
    AnswerPolicy,
    Backlog,
    Participant,
    ReadState,
    Respond,
    Roster,
    RoutingRule,
    TypingGate,
    backlog_action,
    compile_rule,
    mentions,
)
from uamp_proto.errors import LocalProtocolError, ProtocolError

from .pair import Pair


def _p(member: str, user: str, kind: str = "user") -> Participant:
    return Participant(member=member, user_id=user, username=user, kind=kind)


def test_presence_is_per_user_not_per_session() -> None:
    roster = Roster()
    assert roster.join(_p("a1", "alice")) is True  # alice comes online
    assert roster.join(_p("a2", "alice")) is False  # her second session: no news
    assert roster.join(_p("b1", "bob")) is True
    assert [p.user_id for p in roster.online()] == ["alice", "bob"]
    assert roster.leave("a1") == (_p("a1", "alice"), False)  # still online through a2
    assert roster.leave("a2") == (_p("a2", "alice"), True)  # now offline
    assert roster.leave("a2") == (None, False)
    assert roster.users() == ["bob"]
    with pytest.raises(ProtocolError):
        roster.join(_p("b1", "bob"))


# (time, is_typing) in -> broadcasts out, one user, min_interval 0.25, timeout 5
TYPING_TABLE = [
    ("first start is told at once", [(0.0, True)], [(0.0, True)]),
    ("a repeat start says nothing", [(0.0, True), (0.1, True), (1.0, True)], [(0.0, True)]),
    ("stop right after start waits for the interval", [(0.0, True), (0.1, False)], [(0.0, True)]),
    ("stop after the interval is told", [(0.0, True), (0.3, False)], [(0.0, True), (0.3, False)]),
    ("a stop with nothing shown is silent", [(0.0, False)], []),
]


@pytest.mark.parametrize(("name", "inputs", "told"), TYPING_TABLE, ids=[t[0] for t in TYPING_TABLE])
def test_typing_gate_table(
    name: str, inputs: list[tuple[float, bool]], told: list[tuple[float, bool]]
) -> None:
    gate = TypingGate(min_interval=0.25, timeout=5.0)
    out = []
    for now, typing in inputs:
        out += [(now, state) for _, state in gate.update("alice", typing, now)]
    assert out == told


def test_held_state_is_delivered_by_poll_and_timeout_clears() -> None:
    gate = TypingGate(min_interval=0.25, timeout=5.0)
    assert gate.update("alice", True, 0.0) == [("alice", True)]
    assert gate.update("alice", False, 0.1) == []
    assert gate.next_deadline() == pytest.approx(0.25)
    assert gate.poll(0.2) == []
    assert gate.poll(0.25) == [("alice", False)]
    assert gate.next_deadline() is None
    # Typing, then silence: cleared after the timeout.
    assert gate.update("bob", True, 10.0) == [("bob", True)]
    assert gate.next_deadline() == pytest.approx(15.0)
    assert gate.poll(14.9) == []
    assert gate.poll(15.0) == [("bob", False)]


def test_typing_at_50_per_second_makes_a_few_per_second() -> None:
    gate = TypingGate(min_interval=0.25, timeout=5.0)
    told = []
    for n in range(500):  # ten seconds of 50/s, alternating
        now = n / 50
        told += gate.update("alice", n % 2 == 0, now)
        told += gate.poll(now)
    assert len(told) <= 10 * 4 + 1
    assert len(told) >= 10  # and the others do hear about it


def test_clear_tells_only_a_shown_state() -> None:
    gate = TypingGate()
    assert gate.clear("alice", 0.0) == []
    gate.update("alice", True, 0.0)
    assert gate.clear("alice", 0.1) == [("alice", False)]
    assert gate.poll(10.0) == []


@given(st.lists(st.tuples(st.floats(0, 0.2), st.booleans()), max_size=200))
def test_typing_broadcasts_are_spaced_and_alternate(steps: list[tuple[float, bool]]) -> None:
    gate = TypingGate(min_interval=0.25, timeout=5.0)
    now, told = 0.0, []
    for gap, typing in steps:
        now += gap
        told += [(now, s) for _, s in gate.update("u", typing, now) + gate.poll(now)]
    for (t1, s1), (t2, s2) in itertools.pairwise(told):
        assert t2 - t1 >= 0.25 - 1e-9
        assert s1 != s2  # only changes are told
    if told:
        assert told[0][1] is True


def test_read_state_moves_forward_only() -> None:
    reads = ReadState()
    assert reads.mark("alice", 2, last_seq=3) is True
    assert reads.mark("alice", 1, last_seq=3) is False
    assert reads.mark("alice", 3, last_seq=3) is True
    assert reads.of("alice") == 3 and reads.of("bob") == 0
    for bad in (0, 4):
        with pytest.raises(ProtocolError) as err:
            reads.mark("bob", bad, last_seq=3)
        assert err.value.code == "unknown_message"


def test_mentions() -> None:
    assert mentions("@demo hi @bot, and @demo again; mail a@b.c") == ["demo", "bot"]
    assert mentions("no one") == []


POLICY_TABLE = [
    (AnswerPolicy(respond=Respond.EVERY), "hello", ["demo", "bot"]),
    (AnswerPolicy(), "hello", []),
    (AnswerPolicy(), "@bot hello", ["bot"]),
    (AnswerPolicy(), "@ghost hello", []),
    (AnswerPolicy(respond=Respond.NONE), "@bot hello", []),
    (
        AnswerPolicy(
            respond=Respond.RULES,
            rules=(
                RoutingRule(match="weather", agent="demo"),
                RoutingRule(match="weather|rain", agent="bot", priority=5),
            ),
        ),
        "Will it RAIN? weather please",
        ["bot"],
    ),
    (AnswerPolicy(respond=Respond.RULES, rules=(RoutingRule(match="x", agent="demo"),)), "y", []),
    (AnswerPolicy(respond=Respond.RULES), "@demo y", ["demo"]),
]


@pytest.mark.parametrize(("policy", "text", "agents"), POLICY_TABLE)
def test_answer_policy_table(policy: AnswerPolicy, text: str, agents: list[str]) -> None:
    assert policy.choose(text, ["demo", "bot"]) == agents
    assert policy.choose(text, ["demo", "bot"], from_agent=True) == []


def test_policy_json_round_trip_and_refusals() -> None:
    policy = AnswerPolicy.from_json(
        {"respond": "rules", "rules": [{"match": "a+", "agent": "demo", "priority": 2}]}
    )
    assert AnswerPolicy.from_json(policy.to_json()) == policy
    for bad, code, field in (
        ({"respond": "sometimes"}, "invalid_event", None),
        ({"rules": [{"agent": "x"}]}, "invalid_request", "chat.rules[0]"),
        ({"rules": [{"match": "(", "agent": "x"}]}, "invalid_request", "chat.rules[0].match"),
        ({"rules": [{"match": "a" * 257, "agent": "x"}]}, "invalid_request", "chat.rules[0].match"),
        ({"rules": [{"match": r"(a)\1", "agent": "x"}]}, "invalid_request", "chat.rules[0].match"),
        ({"rules": [{"match": "x", "agent": "x"}] * 65}, "invalid_request", "chat.rules"),
    ):
        with pytest.raises(ProtocolError) as err:
            AnswerPolicy.from_json(bad)
        assert err.value.code == code and "chat." in err.value.message
        assert err.value.field == field


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_rule_pattern_compiles_or_is_refused_as_invalid_request(pattern: str) -> None:
    try:
        compiled = compile_rule(pattern)
    except ProtocolError as exc:
        assert exc.code == "invalid_request" and exc.field == "match"
    else:
        compiled.search("some text to match, " * 50)  # linear: never a backtracking blow-up


def test_rules_are_matched_without_backtracking() -> None:
    # Python's re takes about 2**n steps for (a+)+$ against n a's and a "!"; RE2 is linear.
    rule = RoutingRule(match="(a+)+$", agent="demo")
    assert not rule.matches("a" * 5000 + "!")
    assert rule.matches("A" * 5000)  # case-insensitive


BACKLOG_TABLE = [
    (0, False, Backlog.OK),
    (50, False, Backlog.OK),
    (51, False, Backlog.WARN),
    (51, True, Backlog.OK),
    (100, True, Backlog.OK),
    (101, True, Backlog.DROP),
    (101, False, Backlog.DROP),
]


@pytest.mark.parametrize(("queued", "warned", "action"), BACKLOG_TABLE)
def test_backlog_table(queued: int, warned: bool, action: Backlog) -> None:
    assert backlog_action(queued, 100, warned=warned) is action


def test_chat_input_is_the_rooms_not_the_next_response() -> None:
    pair = Pair()
    pair.open(session_id="s1")
    pair.client_sends(ev.InputText(session_id="s1", text="to the room", context={"chat_id": "c1"}))
    pair.client_sends(ev.InputText(session_id="s1", text="private"))
    server = pair.server.session("s1")
    assert server.chats == {"c1"}
    assert [item.text for _, item in server.pending_input] == ["private"]  # type: ignore[union-attr]


def test_a_chat_scoped_session_sends_its_text_to_the_room_and_typing_joins() -> None:
    pair = Pair()
    pair.to_server(pair.client.create_session(session_id="s1", chat="room"))
    pair.to_client(pair.server.accept("s1"))
    pair.client_sends(ev.InputText(session_id="s1", text="hi all"))
    pair.client_sends(ev.InputTyping(session_id="s1", is_typing=True, chat_id="other"))
    server = pair.server.session("s1")
    assert server.pending_input == [] and server.chats == {"room", "other"}


def test_chat_responses_do_not_touch_the_sessions_own_slot() -> None:
    pair = Pair()
    pair.open(session_id="s1")
    for event in (
        ev.ResponseCreated(session_id="s1", response_id="r_chat", unknown={"chat_id": "c"}),
        ev.ResponseDelta(
            session_id="s1", response_id="r_chat", delta=_text("hi"), unknown={"chat_id": "c"}
        ),
        ev.ResponseDone(
            session_id="s1",
            response_id="r_chat",
            response=ty.ResponseOutput(status="completed", output=[]),
            unknown={"chat_id": "c"},
        ),
    ):
        pair.server_sends(event)
    assert pair.client.session("s1").response is None
    # Without chat_id the same delta is a protocol error: there is no response.
    with pytest.raises(LocalProtocolError):
        pair.server.send(ev.ResponseDelta(session_id="s1", response_id="r", delta=_text("x")))


def test_too_many_chats_is_refused() -> None:
    pair = Pair()
    pair.open(session_id="s1")
    for n in range(16):
        pair.client_sends(ev.InputTyping(session_id="s1", is_typing=True, chat_id=f"c{n}"))
    with pytest.raises(LocalProtocolError) as err:
        pair.client.send(ev.InputTyping(session_id="s1", is_typing=True, chat_id="one-more"))
    assert err.value.code == "too_many_chats"


def _text(text: str) -> ty.DeltaText:
    return ty.DeltaText(text=text)
