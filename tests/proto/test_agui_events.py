"""AG-UI chunk events expanded as the client transformer does, and the history a stream builds."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uamp_proto.adapters.agui_events import ChunkError, ChunkExpander, apply_events, expand_chunks


def _text(mid: str | None = None, delta: str | None = None, **more: Any) -> dict[str, Any]:
    return {
        "type": "TEXT_MESSAGE_CHUNK",
        **({"messageId": mid} if mid else {}),
        **({"delta": delta} if delta is not None else {}),
        **more,
    }


def _tool(cid: str | None = None, delta: str | None = None, **more: Any) -> dict[str, Any]:
    return {
        "type": "TOOL_CALL_CHUNK",
        **({"toolCallId": cid} if cid else {}),
        **({"delta": delta} if delta is not None else {}),
        **more,
    }


START_M = {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}
END_M = {"type": "TEXT_MESSAGE_END", "messageId": "m"}
START_C = {"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "f"}
END_C = {"type": "TOOL_CALL_END", "toolCallId": "c"}


def _content(mid: str, delta: str) -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": delta}


def _args(cid: str, delta: str) -> dict[str, Any]:
    return {"type": "TOOL_CALL_ARGS", "toolCallId": cid, "delta": delta}


#: (open before, event, events out, open after): the module docstring's table.
TABLE = [
    (None, _text("m", "hi"), [START_M, _content("m", "hi")], ("text", "m")),
    (None, _text("m"), [START_M], ("text", "m")),
    (
        None,
        _text("m", "x", role="user"),
        [{**START_M, "role": "user"}, _content("m", "x")],
        ("text", "m"),
    ),
    (("text", "m"), _text("m", "a"), [_content("m", "a")], ("text", "m")),
    (("text", "m"), _text(None, "a"), [_content("m", "a")], ("text", "m")),
    (("text", "m"), _text(None, ""), [], ("text", "m")),
    (
        ("text", "m"),
        _text("n", "b"),
        [END_M, {**START_M, "messageId": "n"}, _content("n", "b")],
        ("text", "n"),
    ),
    (
        ("text", "m"),
        _tool("c", "{", toolCallName="f"),
        [END_M, START_C, _args("c", "{")],
        ("tool", "c"),
    ),
    (
        None,
        _tool("c", toolCallName="f", parentMessageId="m"),
        [{**START_C, "parentMessageId": "m"}],
        ("tool", "c"),
    ),
    (("tool", "c"), _tool(None, "}"), [_args("c", "}")], ("tool", "c")),
    (("tool", "c"), _tool("c", "}"), [_args("c", "}")], ("tool", "c")),
    (
        ("tool", "c"),
        _tool("d", "{}", toolCallName="g"),
        [END_C, {**START_C, "toolCallId": "d", "toolCallName": "g"}, _args("d", "{}")],
        ("tool", "d"),
    ),
    (("tool", "c"), _text("m", "t"), [END_C, START_M, _content("m", "t")], ("text", "m")),
    (
        ("text", "m"),
        {"type": "STEP_STARTED", "stepName": "s"},
        [END_M, {"type": "STEP_STARTED", "stepName": "s"}],
        None,
    ),
    (("tool", "c"), {"type": "RUN_FINISHED"}, [END_C, {"type": "RUN_FINISHED"}], None),
    (None, {"type": "RUN_FINISHED"}, [{"type": "RUN_FINISHED"}], None),
]


@pytest.mark.parametrize(("before", "event", "out", "after"), TABLE)
def test_each_row_of_the_expansion_table(
    before: tuple[str, str] | None,
    event: dict[str, Any],
    out: list[dict[str, Any]],
    after: tuple[str, str] | None,
) -> None:
    expander = ChunkExpander()
    expander.open = before
    assert expander.feed(event) == out
    assert expander.open == after


@pytest.mark.parametrize(
    "event",
    [_text(None, "x"), _tool(None, "{"), _tool("c", "{")],  # no id; a call's first chunk names it
    ids=["text-without-id", "tool-without-id", "tool-without-name"],
)
def test_a_first_chunk_that_names_nothing_is_refused(event: dict[str, Any]) -> None:
    with pytest.raises(ChunkError):
        ChunkExpander().feed(event)


def test_the_end_of_the_stream_closes_what_chunks_opened() -> None:
    assert expand_chunks([_text("m", "a")]) == [START_M, _content("m", "a"), END_M]
    assert expand_chunks([]) == []


# --- the same conversation in either form builds the same history ----------------------------

_pieces = st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=4)
_turns = st.lists(
    st.one_of(
        st.tuples(st.just("text"), _pieces),
        st.tuples(st.just("tool"), st.sampled_from(["f", "g"]), _pieces),
    ),
    min_size=1,
    max_size=6,
)


def _explicit(turns: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"type": "RUN_STARTED", "threadId": "t", "runId": "r"}]
    for n, turn in enumerate(turns):
        if turn[0] == "text":
            mid = f"m{n}"
            out += [{**START_M, "messageId": mid}, *[_content(mid, p) for p in turn[1]]]
            out.append({**END_M, "messageId": mid})
        else:
            cid = f"c{n}"
            out.append({**START_C, "toolCallId": cid, "toolCallName": turn[1]})
            out += [_args(cid, p) for p in turn[2]]
            out.append({**END_C, "toolCallId": cid})
    return [*out, {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}]


def _chunked(turns: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"type": "RUN_STARTED", "threadId": "t", "runId": "r"}]
    for n, turn in enumerate(turns):
        if turn[0] == "text":
            first, *rest = turn[1]
            out += [_text(f"m{n}", first), *[_text(None, p) for p in rest]]
        else:
            first, *rest = turn[2]
            out.append(_tool(f"c{n}", first, toolCallName=turn[1]))
            out += [_tool(None, p) for p in rest]
    return [*out, {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}]


@given(_turns)
def test_chunks_build_the_history_the_triads_build(turns: list[Any]) -> None:
    assert expand_chunks(_chunked(turns)) == _explicit(turns)
    history = apply_events(_chunked(turns))
    assert history == apply_events(_explicit(turns))
    texts = ["".join(t[1]) for t in turns if t[0] == "text"]
    calls = [("".join(t[2]), t[1]) for t in turns if t[0] == "tool"]
    assert [m["content"] for m in history if "content" in m] == texts
    assert [
        (c["function"]["arguments"], c["function"]["name"])
        for m in history
        for c in m.get("toolCalls", [])
    ] == calls


def test_apply_events_follows_the_reference_client() -> None:
    known = [{"id": "u1", "role": "user", "content": "hi"}]
    events = [
        {
            "type": "RUN_STARTED",
            "input": {"messages": [*known, {"id": "u2", "role": "user", "content": "more"}]},
        },
        _text("a1", "Let me look."),
        _tool("c1", '{"q":', toolCallName="search", parentMessageId="a1"),
        _tool(None, '"x"}'),
        {"type": "TOOL_CALL_RESULT", "messageId": "r1", "toolCallId": "c1", "content": "found"},
        _tool("c2", "{}", toolCallName="other"),  # no parent: its own assistant message
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "nobody", "delta": "lost"},  # skipped
    ]
    history = apply_events(events, known)
    assert [(m["id"], m["role"]) for m in history] == [
        ("u1", "user"),
        ("u2", "user"),
        ("a1", "assistant"),
        ("r1", "tool"),
        ("c2", "assistant"),
    ]
    assert history[2]["content"] == "Let me look."
    assert history[2]["toolCalls"] == [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q":"x"}'}}
    ]
    assert history[3] == {"id": "r1", "role": "tool", "toolCallId": "c1", "content": "found"}
    snapshot = {
        "type": "MESSAGES_SNAPSHOT",
        "messages": [{"id": "u1", "role": "user", "content": "hello"}],
    }
    assert apply_events([snapshot], history) == [{"id": "u1", "role": "user", "content": "hello"}]
