"""AG-UI runs against a real server: every event of the real SSE stream validates
against the ag-ui-protocol package's pydantic models, and the ordering rules
hold (RUN_STARTED first, RUN_FINISHED/RUN_ERROR last, every start ended)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio
from ag_ui.core import Event, EventType, RunAgentInput
from pydantic import TypeAdapter

from tests._support.agents import TestAgent
from tests._support.tools import WEATHER_FUNCTION
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.agui import apply_patch, state_delta, state_update
from uamp_proto.payment import TokenPolicy
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent

EVENT = TypeAdapter(Event)


class BusyAgent(TestAgent):
    """Thinks, works in a step, updates the state, calls a server tool, answers."""

    name = "busy"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        state = dict(request.metadata["agui_state"] or {})
        await emit(ev.Thinking(content="Let me ", is_delta=True))
        await emit(ev.Thinking(content="think.", is_delta=True))
        await emit(ev.Progress(target="search", stage="start", message="Searching"))
        await emit(
            ev.ResponseDelta(
                delta=ty.DeltaToolCall(
                    tool_call=ty.ToolCallFragment(id="srv1", name="lookup", arguments='{"q":')
                )
            )
        )
        await emit(
            ev.ResponseDelta(
                delta=ty.DeltaToolCall(tool_call=ty.ToolCallFragment(id="srv1", arguments='"x"}'))
            )
        )
        await emit(
            ev.ResponseDelta(
                delta=ty.DeltaToolResult(
                    tool_result=ty.ToolResultFragment(call_id="srv1", result="found")
                )
            )
        )
        state["searched"] = True
        await emit(state_update(state))
        await emit(state_delta([{"op": "add", "path": "/count", "value": 1}]))
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="Done ")))
        await emit(ev.Progress(target="search", stage="progress", percent=50.0))
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="now.")))
        await emit(ev.RateLimit(limit=10, remaining=9))
        # the step is never finished by the agent: the encoder must close it


class CrashAgent(TestAgent):
    name = "crash"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="half a sent")))
        await trio.sleep(0)
        raise RuntimeError("boom")


@pytest.fixture
def server(thread_server):  # type: ignore[no-untyped-def]
    return thread_server(
        create_app(
            [DemoAgent(), BusyAgent(), CrashAgent()],
            payment_policy=TokenPolicy({"paid"}, agents={"crash"}),
        )
    )


def run_input(text: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "threadId": "thread-1",
        "runId": "run-1",
        "state": {},
        "messages": [{"id": "u1", "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    body.update(extra)
    RunAgentInput.model_validate(body)  # what we send is what the TS client sends
    return body


def stream(server: Any, agent: str, body: Any, headers: dict[str, str] | None = None) -> list[Any]:
    """POST a run; every SSE event validated by ag-ui's models."""
    with httpx.stream(
        "POST", f"{server.url}/agents/{agent}/agui", json=body, headers=headers, timeout=10
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = []
        for line in resp.iter_lines():
            if not line:
                continue
            assert line.startswith("data: ")
            raw = json.loads(line[6:])
            model = EVENT.validate_python(raw)
            assert not model.model_extra, f"unknown fields in {raw}"
            assert model.model_dump(mode="json", by_alias=True) == raw
            events.append(model)
    check_order(events)
    return events


def check_order(events: list[Any]) -> None:
    types = [e.type for e in events]
    assert types[0] == EventType.RUN_STARTED
    assert types[-1] in (EventType.RUN_FINISHED, EventType.RUN_ERROR)
    assert types.count(EventType.RUN_STARTED) == 1
    assert types.count(EventType.RUN_FINISHED) + types.count(EventType.RUN_ERROR) == 1
    open_: dict[str, set[str]] = {"text": set(), "tool": set(), "reasoning": set(), "rmsg": set()}
    steps: list[str] = []
    pairs = {
        EventType.TEXT_MESSAGE_START: ("text", "message_id", True),
        EventType.TEXT_MESSAGE_END: ("text", "message_id", False),
        EventType.TOOL_CALL_START: ("tool", "tool_call_id", True),
        EventType.TOOL_CALL_END: ("tool", "tool_call_id", False),
        EventType.REASONING_START: ("reasoning", "message_id", True),
        EventType.REASONING_END: ("reasoning", "message_id", False),
        EventType.REASONING_MESSAGE_START: ("rmsg", "message_id", True),
        EventType.REASONING_MESSAGE_END: ("rmsg", "message_id", False),
    }
    for e in events:
        if e.type in pairs:
            kind, field, opening = pairs[e.type]
            key = getattr(e, field)
            if opening:
                assert key not in open_[kind]
                open_[kind].add(key)
            else:
                assert key in open_[kind], f"{e.type} without a start"
                open_[kind].remove(key)
        elif e.type == EventType.TEXT_MESSAGE_CONTENT:
            assert e.message_id in open_["text"]
        elif e.type == EventType.TOOL_CALL_ARGS:
            assert e.tool_call_id in open_["tool"]
        elif e.type == EventType.REASONING_MESSAGE_CONTENT:
            assert e.message_id in open_["rmsg"]
        elif e.type == EventType.STEP_STARTED:
            steps.append(e.step_name)
        elif e.type == EventType.STEP_FINISHED:
            assert e.step_name in steps  # paired by name (AG-UI does not require nesting)
            steps.remove(e.step_name)
        elif e.type in (EventType.RUN_FINISHED, EventType.RUN_ERROR):
            assert not any(open_.values()), f"still open at the end: {open_}"
            assert not steps, f"steps still open: {steps}"


def test_text_run(server) -> None:  # type: ignore[no-untyped-def]
    events = stream(server, "demo", run_input("hello agui", state={"theme": "dark"}))
    types = [e.type for e in events]
    assert types[:3] == [
        EventType.RUN_STARTED,
        EventType.STATE_SNAPSHOT,
        EventType.TEXT_MESSAGE_START,
    ]
    assert events[0].thread_id == "thread-1" and events[0].run_id == "run-1"
    assert events[1].snapshot == {"theme": "dark"}
    assert events[2].role == "assistant"
    text = "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT)
    assert text == "You said: hello agui"
    assert types.count(EventType.TEXT_MESSAGE_CONTENT) == 4  # one per word
    snapshot = next(e for e in events if e.type == EventType.MESSAGES_SNAPSHOT)
    assert [(m.role, m.content) for m in snapshot.messages] == [
        ("user", "hello agui"),
        ("assistant", "You said: hello agui"),
    ]
    finished = events[-1]
    assert finished.type == EventType.RUN_FINISHED
    assert finished.outcome is None
    assert finished.usage[0].input_tokens == 2 and finished.usage[0].output_tokens == 4


def test_tool_call_run_and_the_next_run_with_its_result(server) -> None:  # type: ignore[no-untyped-def]
    events = stream(server, "demo", run_input("get_weather for Paris", tools=[WEATHER_FUNCTION]))
    types = [e.type for e in events]
    assert types == [
        EventType.RUN_STARTED,
        EventType.STATE_SNAPSHOT,
        EventType.TOOL_CALL_START,
        EventType.TOOL_CALL_ARGS,
        EventType.TOOL_CALL_END,
        EventType.MESSAGES_SNAPSHOT,
        EventType.RUN_FINISHED,
    ]
    start = events[2]
    assert start.tool_call_name == "get_weather"
    assert json.loads(events[3].delta) == {"city": "get_weather for Paris"}
    assert events[-1].outcome.type == "success"
    assert events[-1].outcome.pending_tool_call_ids == [start.tool_call_id]
    history = [m.model_dump(mode="json", by_alias=True) for m in events[5].messages]
    assert history[-1]["toolCalls"][0]["id"] == start.tool_call_id
    history.append(
        {"id": "t1", "role": "tool", "toolCallId": start.tool_call_id, "content": "sunny"}
    )
    second = stream(server, "demo", run_input("", messages=history, runId="run-2"))
    text = "".join(e.delta for e in second if e.type == EventType.TEXT_MESSAGE_CONTENT)
    assert text == "Tool get_weather returned: sunny"


def test_reasoning_steps_server_tools_state_and_custom(server) -> None:  # type: ignore[no-untyped-def]
    events = stream(server, "busy", run_input("go", state={"query": "x"}))
    types = [e.type for e in events]
    assert types[2:6] == [
        EventType.REASONING_START,
        EventType.REASONING_MESSAGE_START,
        EventType.REASONING_MESSAGE_CONTENT,
        EventType.REASONING_MESSAGE_CONTENT,
    ]
    assert types.index(EventType.REASONING_END) < types.index(EventType.TOOL_CALL_START)
    assert EventType.STEP_STARTED in types and EventType.STEP_FINISHED in types
    result = next(e for e in events if e.type == EventType.TOOL_CALL_RESULT)
    assert result.tool_call_id == "srv1" and result.content == "found"
    args = "".join(e.delta for e in events if e.type == EventType.TOOL_CALL_ARGS)
    assert json.loads(args) == {"q": "x"}
    state: Any = next(e for e in events if e.type == EventType.STATE_SNAPSHOT).snapshot
    for delta in (e for e in events if e.type == EventType.STATE_DELTA):
        state = apply_patch(
            state, [op.model_dump(mode="json", by_alias=True) for op in delta.delta]
        )
    assert state == {"query": "x", "searched": True, "count": 1}
    activity = next(e for e in events if e.type == EventType.ACTIVITY_SNAPSHOT)
    assert activity.activity_type == "PROGRESS" and activity.content["percent"] == 50.0
    custom = next(e for e in events if e.type == EventType.CUSTOM)
    assert custom.name == "rate_limit" and custom.value["remaining"] == 9
    roles = [
        m.role for m in next(e for e in events if e.type == EventType.MESSAGES_SNAPSHOT).messages
    ]
    assert roles == ["user", "reasoning", "assistant", "tool", "assistant"]


def test_agent_failure_is_run_error_after_closing_the_message(server) -> None:  # type: ignore[no-untyped-def]
    events = stream(server, "crash", run_input("hi"), headers={"X-PAYMENT": "paid"})
    types = [e.type for e in events]
    assert types[-2:] == [EventType.TEXT_MESSAGE_END, EventType.RUN_ERROR]
    assert events[-1].code == "internal_error"


def test_payment_required_is_run_error(server) -> None:  # type: ignore[no-untyped-def]
    events = stream(server, "crash", run_input("hi"))
    assert [e.type for e in events] == [
        EventType.RUN_STARTED,
        EventType.STATE_SNAPSHOT,
        EventType.RUN_ERROR,
    ]
    assert events[-1].code == "payment_required"
    assert events[-1].metadata["status_code"] == 402
    assert events[-1].metadata["accepts"][0]["scheme"] == "token"


@pytest.mark.parametrize(
    "body",
    [
        {"threadId": "t", "runId": "r", "messages": [{"id": "1", "role": "wizard"}]},
        {"threadId": "t", "runId": "r", "messages": "nope"},
        {"threadId": "t", "runId": "r", "messages": [], "tools": [{"description": "no name"}]},
        {"threadId": "t", "runId": "r", "messages": [{"role": "user", "content": "no id"}]},
    ],
)
def test_bad_run_input_is_run_error(server, body: dict[str, Any]) -> None:  # type: ignore[no-untyped-def]
    events = stream(server, "demo", body)
    assert [e.type for e in events] == [EventType.RUN_STARTED, EventType.RUN_ERROR]
    assert events[0].thread_id == "t" and events[0].run_id == "r"
    assert events[1].code == "invalid_input" and events[1].message


@pytest.mark.parametrize("content", [b"not json", b"[]", b'{"messages": []}', b'{"threadId": "t"}'])
def test_not_a_run_input_is_400(server, content: bytes) -> None:  # type: ignore[no-untyped-def]
    resp = httpx.post(f"{server.url}/agents/demo/agui", content=content, timeout=10)
    assert resp.status_code == 400
    assert resp.headers["content-type"] == "application/json"
    assert resp.json()["error"]["message"]


def _as_chunks(events: list[Any]) -> list[dict[str, Any]]:
    """A run re-encoded in AG-UI's convenience forms with ag-ui's own event classes and
    encoder (a client or proxy that keeps its streams compact): each text message and
    tool call becomes chunks, a delta split in two."""
    from ag_ui.core import TextMessageChunkEvent, ToolCallChunkEvent
    from ag_ui.encoder import EventEncoder

    encoder, out = EventEncoder(), []
    for event in events:
        if event.type in (EventType.TEXT_MESSAGE_START, EventType.TEXT_MESSAGE_END):
            continue
        if event.type in (EventType.TOOL_CALL_START, EventType.TOOL_CALL_END):
            if event.type == EventType.TOOL_CALL_START:  # the opening chunk: id and name
                chunk = ToolCallChunkEvent(
                    tool_call_id=event.tool_call_id,
                    tool_call_name=event.tool_call_name,
                    parent_message_id=event.parent_message_id,
                )
                out.append(encoder.encode(chunk))
            continue
        if event.type == EventType.TEXT_MESSAGE_CONTENT:
            half = len(event.delta) // 2 or 1
            first = TextMessageChunkEvent(message_id=event.message_id, delta=event.delta[:half])
            out.append(encoder.encode(first))
            if event.delta[half:]:
                out.append(encoder.encode(TextMessageChunkEvent(delta=event.delta[half:])))
            continue
        if event.type == EventType.TOOL_CALL_ARGS:
            half = len(event.delta) // 2 or 1
            for piece in (event.delta[:half], event.delta[half:]):
                if piece:
                    out.append(encoder.encode(ToolCallChunkEvent(delta=piece)))
            continue
        out.append(encoder.encode(event))
    return [json.loads(frame.removeprefix("data: ").strip()) for frame in out]


def test_a_chunked_copy_of_a_run_builds_the_history_the_next_run_takes(server) -> None:  # type: ignore[no-untyped-def]
    """TEXT_MESSAGE_CHUNK / TOOL_CALL_CHUNK read back (001's client transformer): the
    history built from the chunked copy is the server's own MESSAGES_SNAPSHOT, and the
    next run takes it as RunAgentInput.messages."""
    from uamp_proto.adapters.agui_events import apply_events

    first = run_input("get_weather for Paris", tools=[WEATHER_FUNCTION])
    events = stream(server, "demo", first)
    chunked = _as_chunks(events)
    kinds = {e["type"] for e in chunked}
    assert {"TOOL_CALL_CHUNK"} <= kinds and not kinds & {"TOOL_CALL_START", "TOOL_CALL_ARGS"}
    snapshot = next(e for e in events if e.type == EventType.MESSAGES_SNAPSHOT)
    without_snapshot = [e for e in chunked if e["type"] != "MESSAGES_SNAPSHOT"]
    history = apply_events(without_snapshot, first["messages"])
    assert history == [m.model_dump(mode="json", by_alias=True) for m in snapshot.messages]
    call = history[-1]["toolCalls"][0]
    assert json.loads(call["function"]["arguments"]) == {"city": "get_weather for Paris"}
    history.append({"id": "t1", "role": "tool", "toolCallId": call["id"], "content": "sunny"})
    second = stream(server, "demo", run_input("", messages=history, runId="run-2"))
    text_events = [e for e in second if e.type == EventType.TEXT_MESSAGE_CONTENT]
    assert "".join(e.delta for e in text_events) == "Tool get_weather returned: sunny"
    # The answer, chunked too, joins the history as one assistant message.
    after = apply_events(_as_chunks(second), history)
    assert after[-1]["role"] == "assistant"
    assert after[-1]["content"] == "Tool get_weather returned: sunny"
