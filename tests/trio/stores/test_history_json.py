"""The session record's conversation as JSON: converted once per message, never shared-mutated."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uamp_proto import types as ty
from uamp_proto.codec import unstructure
from uamp_proto.history import message_weight, weight
from uamp_stores.session_record import HistoryJSON, history_weight


def msg(i: int) -> ty.Message:
    return ty.Message(role="user" if i % 2 else "assistant", content=f"m{i}")


def _count_conversions(patch: pytest.MonkeyPatch) -> list[object]:
    """The messages the session record converts from now on, in order (it still converts)."""
    import uamp_stores.session_record as session_record

    calls: list[object] = []

    def counting(value: object) -> object:
        calls.append(value)
        return unstructure(value)

    patch.setattr(session_record, "unstructure", counting)
    return calls


# Each step: ("extend", n) appends n messages to the current list; ("replace", n)
# puts a new list of n messages in its place (stateless ``messages``, a restore).
CASES = [
    [("extend", 2), ("extend", 2), ("extend", 0), ("extend", 3)],
    [("extend", 3), ("replace", 1), ("extend", 2)],
    [("extend", 4), ("replace", 4), ("extend", 1)],
    [("replace", 0), ("extend", 1), ("replace", 5)],
]


@pytest.mark.parametrize("steps", CASES)
def test_history_json_matches_a_full_conversion_and_earlier_lists_stay(
    steps: list[tuple[str, int]],
) -> None:
    converted, given, stale = HistoryJSON(), HistoryJSON(), HistoryJSON()
    history: list[ty.Message] = []
    handed: list[tuple[list[object], list[object]]] = []  # (list handed out, what it held)
    counter = 0
    for op, n in steps:
        new = [msg(counter + i) for i in range(n)]
        counter += n
        if op == "extend":
            history.extend(new)
        else:
            history = new
        out = converted.of(history)
        assert out == [unstructure(m) for m in history]
        # Weighed once as converted, as the live budget weighs the same messages.
        assert history_weight(out) == out.weight == sum(message_weight(m) for m in history)
        # A plain list (a record read back, carried on) is weighed by walking it.
        assert history_weight(list(out)) == sum(weight(m) for m in out)
        # The core's weights, when aligned, are taken as they are; else the messages weighed.
        weights = [message_weight(m) for m in history]
        assert given.of(history, weights).weight == out.weight
        assert stale.of(history, [*weights[:-1], 0, 0]).weight == out.weight
        handed.append((out, list(out)))
    for out, held in handed:
        assert out == held  # a record queued earlier keeps its conversation


def test_views_share_one_list_and_convert_each_message_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _count_conversions(monkeypatch)
    converted = HistoryJSON()
    history = [msg(0), msg(1)]
    first = converted.of(history)
    history.append(msg(2))
    second = converted.of(history)
    assert len(calls) == 3  # each message once
    assert first._items is second._items  # no copy of the conversation per record
    assert (len(first), len(second)) == (2, 3)
    assert converted.of(history) is second  # nothing new: the same (unchanging) view
    assert first == [unstructure(m) for m in history[:2]]


def test_a_view_reads_like_the_list_it_stands_for() -> None:
    converted = HistoryJSON()
    history = [msg(i) for i in range(4)]
    view = converted.of(history[:3])
    expected = [unstructure(m) for m in history[:3]]
    assert view == expected and expected == view and view == converted.of(history[:3])
    assert view != expected[:2] and view != tuple(expected) and view != "x"
    assert list(view) == expected and len(view) == 3
    assert view[0] == expected[0] and view[-1] == expected[-1] and view[1:] == expected[1:]
    assert view[::-1] == expected[::-1] and view[5:] == []
    for bad in (3, -4):
        with pytest.raises(IndexError):
            view[bad]
    assert repr(view) == repr(expected)
    with pytest.raises(TypeError):
        hash(view)


def test_a_record_with_a_view_encodes_as_with_a_list() -> None:
    from uamp_stores.session_record import SessionRecord

    history = [msg(i) for i in range(3)]
    view = HistoryJSON().of(history)
    with_view = SessionRecord(agent="a", history=view, running="resp_1")
    with_list = SessionRecord(agent="a", history=view.as_list(), running="resp_1")
    assert with_view.encode() == with_list.encode()
    decoded = SessionRecord.decode(with_view.encode())
    assert decoded.history == [unstructure(m) for m in history] and decoded == with_list


# --- a history trimmed to its tail (the core's bound) -------------------------------------

#: A step: ("extend", n) appends n new messages to the current list; ("replace", n)
#: puts a list of n new messages in its place; ("trim", n) puts the current
#: list's last n messages (the same objects) into a new list, as the core's
#: bound does; ("read", 0) converts (a record queued).
_steps = st.lists(
    st.tuples(st.sampled_from(["extend", "replace", "trim", "read"]), st.integers(0, 12)),
    max_size=25,
)


@given(_steps, st.booleans())
@settings(max_examples=300, deadline=None)
def test_a_trimmed_history_keeps_its_tail_json_and_matches_a_full_conversion(
    steps: list[tuple[str, int]], aligned: bool
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        calls = _count_conversions(patch)
        converted = HistoryJSON()
        history: list[ty.Message] = []
        handed: list[tuple[object, list[object]]] = []
        counter = 0
        for op, n in steps:
            if op == "extend":
                history.extend(msg(counter + i) for i in range(n))
                counter += n
            elif op == "replace":
                history = [msg(counter + i) for i in range(n)]
                counter += n
            elif op == "trim":
                history = history[len(history) - min(n, len(history)) :]
            calls.clear()
            weights = [message_weight(m) for m in history] if aligned else None
            out = converted.of(history, weights)
            assert out == [unstructure(m) for m in history]
            assert out.weight == sum(message_weight(m) for m in history)
            # A read converts each message at most once (a trim's reuse is
            # counted in the next test).
            assert len(calls) == len({id(m) for m in calls}) <= len(history)
            handed.append((out, list(out)))
        for view, held in handed:
            assert view == held  # a record queued earlier keeps its conversation


def test_a_trim_converts_only_the_messages_the_old_list_had_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _count_conversions(monkeypatch)
    converted = HistoryJSON()
    history = [msg(i) for i in range(20)]
    first = converted.of(history)
    history.extend([msg(20), msg(21)])  # the turn that made it overlong
    trimmed = history[7:]  # the core's new list: the same objects
    calls.clear()
    view = converted.of(trimmed)
    assert calls == [history[20], history[21]]  # only the two the old list had not converted
    assert view == [unstructure(m) for m in trimmed]
    assert first == [unstructure(m) for m in history[:20]]  # the earlier record unchanged
    # A new list whose first message is not the old one's (a stateless replace,
    # equal but not the same objects) is converted whole.
    calls.clear()
    copy = [msg(i) for i in range(7, 22)]
    assert converted.of(copy) == view and len(calls) == len(copy)
