"""The sans-IO AG-UI adapter: input parsing, the run encoder's guarantees
(table-driven), state patches."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from ag_ui.core import Event
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters import agui
from uamp_proto.adapters.agui import Phase, RunEncoder
from uamp_proto.errors import LocalProtocolError
from uamp_proto.ids import counter_ids

EVENT = TypeAdapter(Event)

# --- input ------------------------------------------------------------------------------


def test_parse_a_full_run_input() -> None:
    run = agui.parse_run_input(
        {
            "threadId": "t",
            "runId": "r",
            "parentRunId": "r0",
            "state": {"k": 1},
            "messages": [
                {"id": "1", "role": "system", "content": "be brief"},
                {
                    "id": "2",
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look"},
                        {
                            "type": "image",
                            "source": {
                                "type": "url",
                                "value": "https://i/x.png",
                                "mimeType": "image/png",
                            },
                        },
                        {
                            "type": "document",
                            "source": {
                                "type": "data",
                                "value": "JVBE",
                                "mimeType": "application/pdf",
                            },
                        },
                    ],
                },
                {
                    "id": "3",
                    "role": "assistant",
                    "toolCalls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"id": "4", "role": "tool", "toolCallId": "c", "content": "ok"},
                {"id": "5", "role": "activity", "activityType": "PLAN", "content": {}},
            ],
            "tools": [{"name": "f", "description": "d", "parameters": {"type": "object"}}],
            "context": [{"description": "user", "value": "Ada"}],
            "forwardedProps": {"tool_choice": "required"},
        }
    )
    assert (run.thread_id, run.run_id, run.parent_run_id, run.state) == ("t", "r", "r0", {"k": 1})
    assert [m.role for m in run.messages] == ["system", "user", "assistant", "tool"]
    items = run.messages[1].content_items
    assert items is not None
    assert items[1] == ty.ImageContent(image=ty.MediaURL(url="https://i/x.png"), format="png")
    assert items[2] == ty.FileContent(file="JVBE", filename="document", mime_type="application/pdf")
    assert run.messages[2].tool_calls == [ty.ToolInvocation(id="c", name="f", arguments="{}")]
    assert len(run.raw_messages) == 5
    turn = agui.turn_request(run, agent="a", response_id="resp")
    assert turn.session_id == "t" and turn.tool_choice == "required"
    assert turn.instructions == "Context from the application:\n- user: Ada"
    assert turn.metadata["agui_state"] == {"k": 1}
    assert turn.tools[0].function.name == "f"


@pytest.mark.parametrize(
    "body", [None, [], "x", {}, {"threadId": "t"}, {"threadId": 1, "runId": "r"}]
)
def test_not_a_run_input(body: Any) -> None:
    with pytest.raises(agui.AguiError) as err:
        agui.parse_run_input(body)
    assert not err.value.started


@pytest.mark.parametrize(
    "extra",
    [
        {"messages": {}},
        {"messages": [{"id": "1", "role": "alien", "content": "x"}]},
        {"messages": [{"id": "1", "role": {}, "content": "x"}]},
        {"messages": [{"id": "1", "role": ["user"], "content": "x"}]},
        {"messages": [{"role": "user", "content": "x"}]},
        {"messages": [{"id": "1", "role": "user", "content": 5}]},
        {"messages": [{"id": "1", "role": "user", "content": [{"type": "gif"}]}]},
        {"messages": [{"id": "1", "role": "tool", "content": "x"}]},
        {"messages": [{"id": "1", "role": "assistant", "toolCalls": [{"id": "c"}]}]},
        {"tools": [{"description": "x"}]},
        {"tools": [{"name": "f", "parameters": "schema"}]},
        {"context": [{"description": "d"}]},
        {"parentRunId": 3},
    ],
)
def test_bad_run_input_after_the_ids(extra: dict[str, Any]) -> None:
    with pytest.raises(agui.AguiError) as err:
        agui.parse_run_input({"threadId": "t", "runId": "r", "messages": [], **extra})
    assert err.value.started and (err.value.thread_id, err.value.run_id) == ("t", "r")
    assert err.value.code == "invalid_input"


# --- the encoder's phases ---------------------------------------------------------------------

INPUTS = ["start", "event", "finish", "error"]


def _drive(encoder: RunEncoder, what: str) -> list[dict[str, Any]]:
    if what == "start":
        return encoder.start()
    if what == "event":
        return encoder.feed(ev.ResponseDelta(delta=ty.DeltaText(text="x")))
    if what == "finish":
        return encoder.finish()
    return encoder.error("boom", "e")


def _at(phase: Phase) -> RunEncoder:
    encoder = RunEncoder("t", "r", counter_ids())
    path = {
        Phase.READY: [],
        Phase.RUNNING: ["start"],
        Phase.FINISHED: ["start", "finish"],
        Phase.ERRORED: ["error"],
    }
    for step in path[phase]:
        _drive(encoder, step)
    assert encoder.phase is phase
    return encoder


@pytest.mark.parametrize(("phase", "what"), list(itertools.product(Phase, INPUTS)))
def test_phase_table(phase: Phase, what: str) -> None:
    encoder = _at(phase)
    new = agui.PHASES.get((phase, what))
    if new is None:
        with pytest.raises(LocalProtocolError):
            _drive(encoder, what)
    else:
        _drive(encoder, what)
        assert encoder.phase is new


def test_error_before_start_still_starts_the_run() -> None:
    out = RunEncoder("t", "r", counter_ids()).error("bad", "invalid_input")
    assert [e["type"] for e in out] == ["RUN_STARTED", "RUN_ERROR"]


# --- the encoder's guarantees, table-driven -------------------------------------------------------


def text(t: str) -> ev.Event:
    return ev.ResponseDelta(delta=ty.DeltaText(text=t))


def frag(cid: str, name: str | None = None, args: str | None = None) -> ev.Event:
    return ev.ResponseDelta(
        delta=ty.DeltaToolCall(tool_call=ty.ToolCallFragment(id=cid, name=name, arguments=args))
    )


def result(cid: str, r: str = "ok") -> ev.Event:
    return ev.ResponseDelta(
        delta=ty.DeltaToolResult(tool_result=ty.ToolResultFragment(call_id=cid, result=r))
    )


def think(t: str, delta: bool = True) -> ev.Event:
    return ev.Thinking(content=t, is_delta=delta)


def step(stage: str, target: str = "plan", message: str | None = "Planning") -> ev.Event:
    return ev.Progress(target=target, stage=stage, message=message)


SCENARIOS: dict[str, tuple[list[ev.Event], list[str]]] = {
    "text": (
        [text("a"), text("b")],
        ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"],
    ),
    "empty text is skipped": ([text("")], []),
    "thinking then text": (
        [think("h"), text("a")],
        [
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
        ],
    ),
    "two complete thoughts": (
        [think("a", False), think("b", False)],
        [
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_END",
        ],
    ),
    "text then server tool then text": (
        [text("a"), frag("c", "f", "{"), frag("c", None, "}"), result("c"), text("b")],
        [
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
        ],
    ),
    "tool call never finished by the agent": (
        [frag("c", "f", "{}")],
        ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"],
    ),
    "client tool call": (
        [ev.ToolCall(call_id="c", name="f", arguments="{}")],
        ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"],
    ),
    "streamed client tool call is not re-sent": (
        [frag("c", "f", "{}"), ev.ToolCall(call_id="c", name="f", arguments="{}")],
        ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"],
    ),
    "tool.call_done ends a call": (
        [frag("c", "f"), ev.ToolCallDone(call_id="c"), ev.ToolCallDone(call_id="c")],
        ["TOOL_CALL_START", "TOOL_CALL_END"],
    ),
    "steps, even unfinished ones, end": (
        [step("start"), step("start", "fetch", "Fetching"), step("end")],
        ["STEP_STARTED", "STEP_STARTED", "STEP_FINISHED", "STEP_FINISHED"],
    ),
    "other progress is activity; acks are dropped": (
        [step("running"), ev.Progress(target="x", stage="ack", delta_seq=1)],
        ["ACTIVITY_SNAPSHOT"],
    ),
    "tool progress is activity": (
        [
            ev.ResponseDelta(
                delta=ty.DeltaToolProgress(tool_progress=ty.ToolProgress(call_id="c", text="50%"))
            )
        ],
        ["ACTIVITY_SNAPSHOT"],
    ),
    "events without an AG-UI twin are custom or raw": (
        [
            ev.RateLimit(limit=1),
            ev.AudioDone(),
            ev.ResponseDelta(delta=ty.DeltaUnknown(raw={"type": "x"})),
        ],
        ["CUSTOM", "CUSTOM", "RAW"],
    ),
    "state": (
        [
            agui.state_snapshot({"a": 1}),
            agui.state_update({"a": 2}),
            agui.state_update({"a": 2}),
            agui.state_delta([{"op": "remove", "path": "/a"}]),
        ],
        ["STATE_SNAPSHOT", "STATE_DELTA", "STATE_DELTA"],
    ),
    "lifecycle events are the binding's business": (
        [ev.ResponseCreated(response_id="r"), ev.UsageDelta(delta=ty.UsageStats(input_tokens=1))],
        [],
    ),
}


def _check_pairs(events: list[dict[str, Any]]) -> None:
    open_: set[tuple[str, str]] = set()
    steps: list[str] = []
    for e in events:
        kind = e["type"]
        key = e.get("messageId") or e.get("toolCallId") or ""
        for family in ("TEXT_MESSAGE", "TOOL_CALL", "REASONING_MESSAGE", "REASONING"):
            if kind == f"{family}_START":
                open_.add((family, key))
            elif kind == f"{family}_END":
                open_.remove((family, key))
        if kind == "STEP_STARTED":
            steps.append(e["stepName"])
        elif kind == "STEP_FINISHED":  # paired by name; AG-UI does not require nesting
            steps.remove(e["stepName"])
    assert not open_ and not steps


@pytest.mark.parametrize(("events", "expected"), SCENARIOS.values(), ids=SCENARIOS.keys())
@pytest.mark.parametrize("ending", ["finish", "error"])
def test_scenarios(events: list[ev.Event], expected: list[str], ending: str) -> None:
    encoder = RunEncoder("t", "r", counter_ids())
    out = encoder.start()
    for event in events:
        out += encoder.feed(event)
    out += encoder.finish() if ending == "finish" else encoder.error("x", "y")
    tail = ["MESSAGES_SNAPSHOT", "RUN_FINISHED"] if ending == "finish" else ["RUN_ERROR"]
    types = [e["type"] for e in out]
    assert types[0] == "RUN_STARTED" and types[-len(tail) :] == tail
    if ending == "finish":
        assert types[1:-2] == expected
    _check_pairs(out)
    for e in out:  # every event is a valid AG-UI event
        EVENT.validate_python(e)
    assert encoder.open_items == {"text": [], "reasoning": [], "tools": [], "steps": []}


def test_finish_reports_pending_client_calls_usage_and_the_conversation() -> None:
    encoder = RunEncoder("t", "r", counter_ids())
    run = agui.parse_run_input(
        {"threadId": "t", "runId": "r", "messages": [{"id": "u", "role": "user", "content": "q"}]}
    )
    encoder.start(run)
    encoder.feed(text("Let me check."))
    encoder.feed(ev.ToolCall(call_id="c1", name="f", arguments='{"a":1}'))
    encoder.feed(ev.UsageDelta(delta=ty.UsageStats(input_tokens=3, output_tokens=2)))
    *_, snapshot, done = encoder.finish()
    assert done["outcome"] == {"type": "success", "pendingToolCallIds": ["c1"]}
    assert done["usage"] == [{"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}]
    assert snapshot["messages"] == [
        {"id": "u", "role": "user", "content": "q"},
        {
            "id": "msg_1",
            "role": "assistant",
            "content": "Let me check.",
            "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
            ],
        },
    ]
    cancelled = RunEncoder("t", "r", counter_ids())
    cancelled.start()
    assert cancelled.finish(cancelled=True)[-1]["outcome"] == {"type": "cancelled"}


def test_text_after_a_tool_call_links_the_parent_message() -> None:
    encoder = RunEncoder("t", "r", counter_ids())
    encoder.start()
    [start_text, _] = encoder.feed(text("a"))
    out = encoder.feed(frag("c", "f"))
    assert out[0] == {"type": "TEXT_MESSAGE_END", "messageId": start_text["messageId"]}
    assert out[1]["parentMessageId"] == start_text["messageId"]


# --- JSON Patch ---------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(alphabet="ab/~c", max_size=3), children, max_size=3)
    ),
    max_leaves=10,
)


@given(JSON, JSON)
def test_diff_then_apply_gives_the_new_state(old: Any, new: Any) -> None:
    assert agui.apply_patch(old, agui.diff_state(old, new)) == new


def test_diff_of_equal_states_is_empty_and_pointers_are_escaped() -> None:
    assert agui.diff_state({"a": [1]}, {"a": [1]}) == []
    assert agui.diff_state({}, {"a/b~": 1}) == [{"op": "add", "path": "/a~1b~0", "value": 1}]


@pytest.mark.parametrize(
    "patch",
    [
        [{"op": "remove", "path": "/missing"}],
        [{"op": "test", "path": "/a", "value": 2}],
        [{"op": "remove", "path": ""}],
        [{"op": "add", "path": "/a/b", "value": 1}],
    ],
)
def test_bad_patches_raise(patch: list[dict[str, Any]]) -> None:
    with pytest.raises((ValueError, KeyError, TypeError, IndexError)):
        agui.apply_patch({"a": 1}, patch)


def test_a_saved_agui_stream_of_chunk_events_reads_as_its_text() -> None:
    """A client that sends the run back re-encoded with the convenience events
    (``TEXT_MESSAGE_CHUNK``, ``TOOL_CALL_CHUNK``) is read like the start/content/end form."""
    import orjson

    from uamp_proto.saved_response import read_saved_response

    events = [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "TOOL_CALL_CHUNK", "toolCallId": "c1", "toolCallName": "f", "delta": "{}"},
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "role": "assistant", "delta": "hel"},
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "delta": "lo"},
        {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"},
    ]
    data = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
    saved = read_saved_response(data)
    assert (saved.transport, saved.text) == ("agui", "hello")


def test_a_saved_stream_whose_first_chunk_names_no_message_is_refused_clearly() -> None:
    import orjson

    from uamp_proto.saved_response import SavedResponseError, read_saved_response

    events = [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "TEXT_MESSAGE_CHUNK", "delta": "orphan"},
    ]
    data = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
    with pytest.raises(SavedResponseError, match="names no messageId"):
        read_saved_response(data)
