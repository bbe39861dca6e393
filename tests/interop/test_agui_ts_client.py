"""AG-UI with the TypeScript client CopilotKit-style frontends use: ``@ag-ui/client`` 1.0.

The client is installed from the npm registry with ``npm ci`` from the lock
file in ``tests/interop/agui_client/`` (its ``node_modules`` kept in the
tests' cache folder, ``tests/_support/cache.py``, and reused while the
client's files are unchanged) and run with
Node against a real server. Its ``HttpAgent`` applies every event to its
message history as a chat UI does; the history after the run must be in
conversation order -- each tool call in the assistant message that makes
it, its result after it, the answer last -- with exactly the ids the stream
used (``MESSAGES_SNAPSHOT`` merges by id, so an id it invents is a message
appended out of place).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests._support.agents import TestAgent
from tests._support.npm import install_client, run_node
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app

CLIENT = Path(__file__).parent / "agui_client"


@pytest.fixture(scope="module")
def client_dir() -> Path:
    return install_client(CLIENT, "agui-client")


class Caller(TestAgent):
    """Calls its own tool with no text before it, reads the result, then answers."""

    name = "caller"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        fragment = ty.ToolCallFragment(id="call_1", name="lookup", arguments='{"q":"uamp"}')
        await emit(ev.ResponseDelta(delta=ty.DeltaToolCall(tool_call=fragment)))
        result = ty.ToolResultFragment(call_id="call_1", result="a protocol", status="completed")
        await emit(ev.ResponseDelta(delta=ty.DeltaToolResult(tool_result=result)))
        await emit(ev.ToolCallDone(call_id="call_1"))
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="uamp is a protocol")))


class Talker(TestAgent):
    """Says something, then asks the client to run its tool."""

    name = "talker"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="Let me check.")))
        await emit(ev.ToolCall(call_id="call_c", name="confirm", arguments='{"ok":true}'))


def stream_ids(events: list[dict[str, Any]]) -> dict[str, str]:
    """Message id per role-ish key as the stream named them (before the snapshot)."""
    out: dict[str, str] = {}
    for e in events:
        if e["type"] == "TOOL_CALL_START":
            out[f"call:{e['toolCallId']}"] = e["parentMessageId"]
        elif e["type"] == "TOOL_CALL_RESULT":
            out[f"result:{e['toolCallId']}"] = e["messageId"]
        elif e["type"] == "TEXT_MESSAGE_START":
            out.setdefault("text", e["messageId"])
    return out


def test_a_server_tool_call_keeps_its_place_in_the_clients_history(
    client_dir: Path, thread_server: Any
) -> None:
    server = thread_server(create_app([Caller()]))
    user = {"id": "u1", "role": "user", "content": "what is uamp?"}
    got = run_node(client_dir, f"{server.url}/agents/caller/agui", json.dumps({"messages": [user]}))
    events, messages = got["events"], got["messages"]
    ids = stream_ids(events)
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start["parentMessageId"] == ids["call:call_1"]
    snapshot = next(e for e in events if e["type"] == "MESSAGES_SNAPSHOT")
    assert [m["id"] for m in snapshot["messages"]] == [
        "u1",
        ids["call:call_1"],
        ids["result:call_1"],
        ids["text"],
    ]
    # The client's history: the call, its result after it, the answer last; no extra message.
    assert [(m["role"], m["id"]) for m in messages] == [
        ("user", "u1"),
        ("assistant", ids["call:call_1"]),
        ("tool", ids["result:call_1"]),
        ("assistant", ids["text"]),
    ]
    assert messages[1]["toolCalls"][0]["function"] == {
        "name": "lookup",
        "arguments": '{"q":"uamp"}',
    }
    assert messages[2]["toolCallId"] == "call_1" and messages[3]["content"] == "uamp is a protocol"
    # Every intermediate history the UI rendered kept the same order (no message ever moved).
    for order in got["orders"]:
        final = [m["id"] for m in messages]
        assert order == [i for i in final if i in order]
    # The base property `timestamp` on every event; the run's input and result filled.
    assert all(isinstance(e.get("timestamp"), int) and e["timestamp"] > 0 for e in events)
    started, finished = events[0], events[-1]
    assert started["type"] == "RUN_STARTED" and started["input"]["runId"] == "run-1"
    assert [m["id"] for m in started["input"]["messages"]] == ["u1"]
    assert started["input"]["threadId"] == "thread-1"
    assert finished["type"] == "RUN_FINISHED" and finished["result"] == "uamp is a protocol"


def test_a_client_tool_call_belongs_to_the_message_that_said_it(
    client_dir: Path, thread_server: Any
) -> None:
    server = thread_server(create_app([Talker()]))
    user = {"id": "u1", "role": "user", "content": "please confirm"}
    tool = {"name": "confirm", "description": "Confirm", "parameters": {"type": "object"}}
    payload = json.dumps({"messages": [user], "tools": [tool]})
    got = run_node(client_dir, f"{server.url}/agents/talker/agui", payload)
    events, messages = got["events"], got["messages"]
    text_id = stream_ids(events)["text"]
    assert next(e for e in events if e["type"] == "TOOL_CALL_START")["parentMessageId"] == text_id
    assert [(m["role"], m["id"]) for m in messages] == [("user", "u1"), ("assistant", text_id)]
    assert messages[1]["content"] == "Let me check."
    assert [c["id"] for c in messages[1]["toolCalls"]] == ["call_c"]
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED"
