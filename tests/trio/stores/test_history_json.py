"""The session record's conversation as JSON: converted once per message, never shared-mutated."""

from __future__ import annotations

import pytest

from uamp_proto import types as ty
from uamp_proto.codec import unstructure
from uamp_proto.history import message_weight, weight
from uamp_stores.session_record import HistoryJSON, history_weight


def msg(i: int) -> ty.Message:
    return ty.Message(role="user" if i % 2 else "assistant", content=f"m{i}")


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
    import uamp_stores.session_record as session_record

    calls: list[object] = []

    def counting(value: object) -> object:
        calls.append(value)
        return unstructure(value)

    monkeypatch.setattr(session_record, "unstructure", counting)
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
