"""Every protocol's native way to ask a human, and to answer: the pure mappings (issue 30)."""

from __future__ import annotations

import calendar
import time
from typing import Any

import hypothesis.strategies as st
import orjson
import pytest
from hypothesis import given

from uamp_proto import types as ty
from uamp_proto.adapters import a2a, a2a_human, a2a_records, acp, agui, ai_sdk, approve_tool, mcp
from uamp_proto.adapters._human import (
    APPROVAL,
    DISMISSED,
    QUESTION,
    Answer,
    AnswerError,
    Ask,
    answer_from_payload,
    approval_word,
    rfc3339,
)
from uamp_proto.ids import counter_ids
from uamp_proto.jsonrpc import JSONRPCError

ADD = Ask(
    id="int_1",
    kind=APPROVAL,
    key="call_1",
    prompt="",
    tool_name="add",
    call_id="call_1",
    arguments={"a": 2, "b": 3},
    expires_at=float(calendar.timegm((2026, 12, 6, 8, 30, 0))),
)
CITY = Ask(
    id="int_2",
    kind=QUESTION,
    key="call_9#0",
    prompt="Which city?",
    schema={"type": "object", "properties": {"city": {"type": "string"}}},
)
FREE = Ask(id="int_3", kind=QUESTION, key="call_9#1", prompt="Anything else?")
PENDING = {a.id: a for a in (ADD, CITY, FREE)}


# --- the shared reading of an answer -----------------------------------------------------------


@pytest.mark.parametrize(
    ("ask", "payload", "expected"),
    [
        (ADD, True, Answer(approved=True)),
        (ADD, False, Answer(approved=False)),
        (ADD, "yes", Answer(approved=True)),
        (ADD, "Deny.", Answer(approved=False)),
        (ADD, {"approved": True, "arguments": {"a": 1, "b": 1}}, None),
        (ADD, {"approved": True, "editedArgs": {"a": 1, "b": 1}}, None),
        (
            ADD,
            {"approved": False, "reason": "too risky"},
            Answer(approved=False, reason="too risky"),
        ),
        (CITY, {"city": "Oslo"}, Answer(value={"city": "Oslo"})),
        (FREE, "no thanks", Answer(value="no thanks")),
    ],
)
def test_an_answer_payload_reads_as(ask: Ask, payload: Any, expected: Answer | None) -> None:
    got = answer_from_payload(ask, payload)
    if expected is None:  # the edited-arguments rows
        expected = Answer(approved=True, arguments={"a": 1, "b": 1})
    assert got == expected


@pytest.mark.parametrize(
    ("ask", "payload"),
    [
        (ADD, "maybe"),
        (ADD, None),
        (ADD, {"approved": "yes"}),
        (ADD, {"approved": True, "arguments": [1, 2]}),
        (ADD, 1),
        (FREE, None),
    ],
)
def test_an_answer_payload_is_refused(ask: Ask, payload: Any) -> None:
    with pytest.raises(AnswerError):
        answer_from_payload(ask, payload)


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("yes", True),
        (" Approve! ", True),
        ("OK", True),
        ("no", False),
        ("reject", False),
        ("perhaps", None),
        ("", None),
        ("yes please", None),
    ],
)
def test_a_yes_or_no_word(text: str, word: bool | None) -> None:
    assert approval_word(text) is word


@given(st.integers(min_value=0, max_value=253_402_300_799))
def test_rfc3339_matches_the_standard_library(seconds: int) -> None:
    expected = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    assert rfc3339(seconds) == expected
    assert calendar.timegm(time.strptime(rfc3339(seconds), "%Y-%m-%dT%H:%M:%SZ")) == seconds


# --- AG-UI: RUN_FINISHED's interrupt outcome; the next run's resume ------------------------------


def _run(resume: list[dict[str, Any]]) -> agui.RunInput:
    return agui.parse_run_input({"threadId": "t", "runId": "r2", "messages": [], "resume": resume})


def test_agui_an_approval_is_an_interrupt_outcome() -> None:
    encoder = agui.RunEncoder("t", "r1", counter_ids())
    encoder.start(agui.parse_run_input({"threadId": "t", "runId": "r1", "messages": []}))
    done = encoder.finish(interrupts=[ADD, CITY])[-1]
    assert done["type"] == "RUN_FINISHED"
    outcome = done["outcome"]
    assert outcome["type"] == "interrupt"
    first, second = outcome["interrupts"]
    assert first["id"] == "int_1"
    assert first["reason"] == "tool_approval"
    assert first["toolCallId"] == "call_1"
    assert first["message"] == 'Allow the agent to run add({"a":2,"b":3})?'
    assert first["responseSchema"]["required"] == ["approved"]
    assert first["metadata"] == {"tool": "add", "arguments": {"a": 2, "b": 3}}
    assert first["expiresAt"] == "2026-12-06T08:30:00Z"
    assert second == {
        "id": "int_2",
        "reason": "input_required",
        "message": "Which city?",
        "responseSchema": CITY.schema,
    }
    assert "pendingToolCallIds" not in outcome  # the interrupt outcome is closed


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            {"interruptId": "int_1", "status": "resolved", "payload": {"approved": True}},
            Answer(approved=True),
        ),
        ({"interruptId": "int_1", "status": "resolved", "payload": False}, Answer(approved=False)),
        ({"interruptId": "int_1", "status": "cancelled"}, Answer(approved=False, reason=DISMISSED)),
        (
            {
                "interruptId": "int_1",
                "status": "resolved",
                "payload": {"approved": True, "editedArgs": {"a": 9}},
            },
            Answer(approved=True, arguments={"a": 9}),
        ),
        (
            {"interruptId": "int_2", "status": "resolved", "payload": {"city": "Oslo"}},
            Answer(value={"city": "Oslo"}),
        ),
        ({"interruptId": "int_3", "status": "cancelled"}, Answer(expired=True, reason=DISMISSED)),
    ],
)
def test_agui_resume_entries_answer(entry: dict[str, Any], expected: Answer) -> None:
    assert agui.parse_resume(_run([entry]), PENDING) == [(entry["interruptId"], expected)]


@pytest.mark.parametrize(
    ("resume", "words"),
    [
        ([{"interruptId": "int_9", "status": "resolved", "payload": True}], "names no pending"),
        ([{"status": "resolved", "payload": True}], "names no pending"),
        ([{"interruptId": "int_1", "status": "done"}], "must be"),
        (
            [{"interruptId": "int_1", "status": "resolved", "payload": "maybe"}],
            "approved true or false",
        ),
        ([{"interruptId": "int_1", "status": "cancelled"}] * 2, "a second time"),
    ],
)
def test_agui_bad_resume_entries_are_run_errors(resume: list[dict[str, Any]], words: str) -> None:
    with pytest.raises(agui.AguiError) as caught:
        agui.parse_resume(_run(resume), PENDING)
    assert caught.value.started and caught.value.code == "invalid_resume"
    assert words in caught.value.message


@pytest.mark.parametrize("resume", ["yes", [1], {"interruptId": "int_1"}])
def test_agui_resume_must_be_an_array_of_objects(resume: Any) -> None:
    with pytest.raises(agui.AguiError, match="'resume'"):
        agui.parse_run_input({"threadId": "t", "runId": "r", "messages": [], "resume": resume})


# --- A2A: input-required with a data part; a message on the task answers --------------------------


def test_a2a_the_status_message_says_it_in_words_and_data() -> None:
    text, data = a2a_human.interrupt_message([ADD])
    assert 'add({"a":2,"b":3})' in text and '"yes" or "no"' in text
    (entry,) = data["interrupts"]
    assert entry == {
        "id": "int_1",
        "kind": "approval",
        "prompt": 'Allow the agent to run add({"a":2,"b":3})?',
        "tool": "add",
        "arguments": {"a": 2, "b": 3},
        "call_id": "call_1",
        "answer_schema": entry["answer_schema"],
        "expires_at": "2026-12-06T08:30:00Z",
    }
    assert entry["answer_schema"]["required"] == ["approved"]
    text, data = a2a_human.interrupt_message([ADD, CITY])
    assert "one data part per question" in text
    assert [e["id"] for e in data["interrupts"]] == ["int_1", "int_2"]


@pytest.mark.parametrize(
    ("data", "text", "pending", "expected"),
    [
        (
            [{"interrupt_id": "int_1", "approved": True}],
            "",
            [ADD],
            [("int_1", Answer(approved=True))],
        ),
        ([], "yes", [ADD], [("int_1", Answer(approved=True))]),
        ([], "No", [ADD], [("int_1", Answer(approved=False))]),
        ([], "Paris", [FREE], [("int_3", Answer(value="Paris"))]),
        (
            [
                {
                    "interrupt_answers": [
                        {"interrupt_id": "int_2", "value": {"city": "Oslo"}},
                        {"interrupt_id": "int_1", "approved": False, "reason": "no"},
                    ]
                }
            ],
            "",
            [ADD, CITY],
            [
                ("int_1", Answer(approved=False, reason="no")),
                ("int_2", Answer(value={"city": "Oslo"})),
            ],
        ),
        (
            [[{"interrupt_id": "int_1", "approved": True, "arguments": {"a": 5, "b": 5}}]],
            "",
            [ADD],
            [("int_1", Answer(approved=True, arguments={"a": 5, "b": 5}))],
        ),
    ],
)
def test_a2a_a_message_on_the_task_answers(
    data: list[Any], text: str, pending: list[Ask], expected: list[Any]
) -> None:
    assert a2a_human.parse_answers(data, text, pending) == expected


@pytest.mark.parametrize(
    ("data", "text", "pending", "words"),
    [
        ([], "", [ADD], "waiting for a human"),
        ([], "perhaps", [ADD], 'reply "yes" or "no"'),
        ([{"interrupt_id": "int_9", "approved": True}], "", [ADD], "names no interrupt"),
        ([{"interrupt_id": "int_1", "approved": True}], "", [ADD, CITY], "int_2"),
        ([], "yes", [ADD, CITY], "waiting for a human"),  # text alone cannot answer two
        ([{"interrupt_id": "int_1", "approved": "sure"}], "", [ADD], "approved"),
    ],
)
def test_a2a_a_message_that_does_not_answer(
    data: list[Any], text: str, pending: list[Ask], words: str
) -> None:
    with pytest.raises(AnswerError, match=words):
        a2a_human.parse_answers(data, text, pending)


def test_a2a_a_task_waits_on_its_interrupts_then_works_again() -> None:
    task = a2a.A2ATask(id="task_1", context_id="ctx_1", agent="demo")
    task.move(a2a.Trigger.START, "t0")
    run = a2a.TaskRun(task, counter_ids())
    first = run.ask_human(ADD, a2a_human.interrupt_message([ADD]), "t1")
    assert [u.state for u in first] == [a2a.TaskState.WORKING, a2a.TaskState.INPUT_REQUIRED]
    assert first[-1].final and task.status_message is not None
    assert task.status_message.data[0]["interrupts"][0]["id"] == "int_1"
    second = run.ask_human(CITY, a2a_human.interrupt_message([ADD, CITY]), "t2")
    assert [u.state for u in second] == [a2a.TaskState.INPUT_REQUIRED]  # still waiting
    assert [a.id for a in task.pending_interrupts] == ["int_1", "int_2"]
    # The store keeps the whole interrupts (a shared store's JSON form).
    again = a2a_records.task_from_json(orjson.loads(orjson.dumps(a2a_records.task_to_json(task))))
    assert again.pending_interrupts == task.pending_interrupts
    assert run.human_answered("int_1", "t3") == []  # one is still pending
    (working,) = run.human_answered("int_2", "t4")
    assert working.state is a2a.TaskState.WORKING and not working.final
    assert task.pending_interrupts == [] and task.status_message is None


# --- ACP: session/request_permission and the chosen option --------------------------------------


def test_acp_the_permission_request_carries_the_call_and_two_options() -> None:
    params = acp.permission_request("sess_1", ADD)
    assert params["sessionId"] == "sess_1"
    assert params["toolCall"] == {
        "toolCallId": "call_1",
        "title": 'Allow the agent to run add({"a":2,"b":3})?',
        "kind": "other",
        "status": "pending",
        "rawInput": {"a": 2, "b": 3},
    }
    assert [(o["optionId"], o["kind"]) for o in params["options"]] == [
        ("allow", "allow_once"),
        ("deny", "reject_once"),
    ]
    assert params["_meta"] == {"uamp/interrupt_id": "int_1"}


def test_acp_the_request_validates_against_the_acp_schema() -> None:
    schema = pytest.importorskip("acp.schema")
    parsed = schema.RequestPermissionRequest.model_validate(acp.permission_request("s", ADD))
    assert parsed.tool_call.tool_call_id == "call_1"
    assert [o.option_id for o in parsed.options] == ["allow", "deny"]


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"outcome": {"outcome": "selected", "optionId": "allow"}}, Answer(approved=True)),
        ({"outcome": {"outcome": "selected", "optionId": "deny"}}, Answer(approved=False)),
        ({"outcome": {"outcome": "cancelled"}}, Answer(approved=False, reason=DISMISSED)),
    ],
)
def test_acp_the_chosen_option_answers(result: dict[str, Any], expected: Answer) -> None:
    assert acp.parse_permission_outcome(result, ADD) == expected


@pytest.mark.parametrize(
    "result",
    [
        {"outcome": {"outcome": "selected", "optionId": "allow_always"}},
        {"outcome": {"outcome": "selected"}},
        {"outcome": "allow"},
        {},
        None,
    ],
)
def test_acp_a_result_of_another_shape_is_invalid_params(result: Any) -> None:
    with pytest.raises(JSONRPCError) as caught:
        acp.parse_permission_outcome(result, ADD)
    assert caught.value.code == -32602


# --- Vercel AI SDK: tool-approval-request; the tool part's approval answers ---------------------


def test_ai_sdk_an_approval_request_follows_the_tool_part() -> None:
    encoder = ai_sdk.StreamEncoder("msg_1", counter_ids())
    encoder.start()
    chunks = encoder.request_approval(ADD)
    kinds = [c["type"] for c in chunks]
    assert kinds == ["start-step", "tool-input-available", "tool-approval-request"]
    assert chunks[1]["toolCallId"] == "call_1" and chunks[1]["input"] == {"a": 2, "b": 3}
    assert chunks[2] == {
        "type": "tool-approval-request",
        "approvalId": "int_1",
        "toolCallId": "call_1",
    }
    assert encoder.finish()[-1]["finishReason"] == "stop"


def _chat(parts: list[dict[str, Any]]) -> ai_sdk.ChatRequest:
    return ai_sdk.parse_chat_request(
        {
            "id": "chat_1",
            "messages": [
                {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "2+3?"}]},
                {"id": "a1", "role": "assistant", "parts": parts},
            ],
        }
    )


def _tool_part(approval: dict[str, Any], state: str = "approval-responded") -> dict[str, Any]:
    return {
        "type": "dynamic-tool",
        "toolName": "add",
        "toolCallId": "call_1",
        "state": state,
        "input": {"a": 2, "b": 3},
        "approval": approval,
    }


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        ([_tool_part({"id": "int_1", "approved": True})], [("int_1", Answer(approved=True))]),
        (
            [_tool_part({"id": "int_1", "approved": False, "reason": "no"})],
            [("int_1", Answer(approved=False, reason="no"))],
        ),
        ([_tool_part({"id": "int_1"}, "approval-requested")], []),  # not answered yet
        ([_tool_part({"id": "int_old", "approved": True})], []),  # history
        ([{"type": "text", "text": "hi"}], []),
    ],
)
def test_ai_sdk_approval_responses(parts: list[dict[str, Any]], expected: list[Any]) -> None:
    assert ai_sdk.parse_approval_responses(_chat(parts), PENDING) == expected


# --- MCP: elicitation/create and the elicitation result -------------------------------------------


@pytest.mark.parametrize(
    ("params", "elicits"),
    [
        ({"capabilities": {"elicitation": {}}}, True),
        ({"capabilities": {"elicitation": {"form": {}}}}, True),
        ({"capabilities": {"elicitation": {"url": {}}}}, False),
        ({"capabilities": {}}, False),
        (None, False),
    ],
)
def test_mcp_client_elicits(params: Any, elicits: bool) -> None:
    assert mcp.client_elicits(params) is elicits


def test_mcp_elicitation_forms() -> None:
    approval = mcp.elicitation_params(ADD)
    assert approval["mode"] == "form"
    assert approval["requestedSchema"]["properties"] == {
        "approved": {"type": "boolean", "title": "Approve"}
    }
    assert mcp.elicitation_params(CITY)["requestedSchema"] == CITY.schema
    free = mcp.elicitation_params(FREE)["requestedSchema"]
    assert free["properties"] == {"answer": {"type": "string", "title": "Answer"}}


def test_mcp_elicitation_params_validate_against_the_mcp_types() -> None:
    types = pytest.importorskip("mcp_types")
    for ask in (ADD, CITY, FREE):
        types.ElicitRequestFormParams.model_validate(mcp.elicitation_params(ask))


@pytest.mark.parametrize(
    ("ask", "result", "expected"),
    [
        (ADD, {"action": "accept", "content": {"approved": True}}, Answer(approved=True)),
        (ADD, {"action": "accept", "content": {"approved": False}}, Answer(approved=False)),
        (ADD, {"action": "accept"}, Answer(approved=True)),
        (ADD, {"action": "decline"}, Answer(approved=False, reason=DISMISSED)),
        (ADD, {"action": "cancel"}, Answer(approved=False, reason=DISMISSED)),
        (CITY, {"action": "accept", "content": {"city": "Oslo"}}, Answer(value={"city": "Oslo"})),
        (FREE, {"action": "accept", "content": {"answer": "fine"}}, Answer(value="fine")),
        (FREE, {"action": "cancel"}, Answer(expired=True, reason=DISMISSED)),
    ],
)
def test_mcp_elicitation_results(ask: Ask, result: dict[str, Any], expected: Answer) -> None:
    assert mcp.parse_elicitation_result(result, ask) == expected


@pytest.mark.parametrize(
    "result",
    [
        {"action": "maybe"},
        {},
        None,
        {"action": "accept", "content": [1]},
        {"action": "accept", "content": {"approved": "y e s"}},
    ],
)
def test_mcp_bad_elicitation_results(result: Any) -> None:
    with pytest.raises(JSONRPCError) as caught:
        mcp.parse_elicitation_result(result, ADD)
    assert caught.value.code == -32602


# --- no native form (Completions, Responses, Anthropic, Realtime): uamp_approve -----------------


def test_the_approve_tool_is_opt_in() -> None:
    declared = approve_tool.tool_definition()
    assert declared.function.name == "uamp_approve"
    assert approve_tool.declares([declared])
    other = ty.ToolDefinition(function=ty.FunctionDefinition(name="add"))
    assert not approve_tool.declares([other])


def test_the_approve_call_is_named_by_the_interrupt_id() -> None:
    call = approve_tool.approve_call(ADD)
    assert call.id == "int_1" and call.name == "uamp_approve"
    args = orjson.loads(call.arguments)
    assert args["interrupt_id"] == "int_1" and args["tool"] == "add"
    assert args["arguments"] == {"a": 2, "b": 3}
    assert args["answer_schema"]["required"] == ["approved"]


@pytest.mark.parametrize(
    ("content", "call_id", "expected"),
    [
        ('{"approved": true}', "int_1", [("int_1", Answer(approved=True))]),
        ("no", "int_1", [("int_1", Answer(approved=False))]),
        ("true", "int_1", [("int_1", Answer(approved=True))]),
        ('{"city": "Oslo"}', "int_2", [("int_2", Answer(value={"city": "Oslo"}))]),
        ("whatever you like", "int_3", [("int_3", Answer(value="whatever you like"))]),
        ('{"approved": true}', "call_other", []),
    ],
)
def test_the_approve_tool_results(content: str, call_id: str, expected: list[Any]) -> None:
    messages = [
        ty.Message(role="user", content="hi"),
        ty.Message(role="tool", tool_call_id=call_id, content=content),
    ]
    assert approve_tool.parse_results(messages, PENDING) == expected


def test_an_approve_result_that_says_neither_yes_nor_no() -> None:
    with pytest.raises(AnswerError):
        approve_tool.parse_results(
            [ty.Message(role="tool", tool_call_id="int_1", content="hmm")], PENDING
        )
