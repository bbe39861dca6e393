"""The ACP adapter without sockets: params, content blocks, updates, stop reasons."""

from __future__ import annotations

from typing import Any

import pytest

from uamp_proto import events as ev
from uamp_proto import jsonrpc as rpc
from uamp_proto import types as ty
from uamp_proto.adapters import acp
from uamp_proto.payment import PaymentRequiredError

CAPS = ty.Capabilities(
    id="demo",
    provider="t",
    modalities=["text", "image"],
    supports_streaming=True,
    provides=["search"],
    tools=ty.ToolCapabilities(supports_tools=True, built_in_tools=["search", "calc"]),
)


@pytest.mark.parametrize(("requested", "answered"), [(1, 1), (2, 1), (0, 1)])
def test_initialize_negotiates_version(requested: int, answered: int) -> None:
    result = acp.initialize_result(
        {"protocolVersion": requested},
        agent_name="demo",
        version="9",
        capabilities=CAPS,
        load_session=True,
    )
    assert result["protocolVersion"] == answered
    assert result["agentCapabilities"]["loadSession"] is True
    assert result["agentCapabilities"]["promptCapabilities"] == {
        "image": True,
        "audio": False,
        "embeddedContext": True,
    }
    assert result["agentInfo"] == {"name": "demo", "title": "demo", "version": "9"}


def test_spec_initialize_shape() -> None:
    result = acp.spec_initialize_result(agent_name="demo", version="9", capabilities=CAPS)
    assert result == {
        "protocolVersion": "1.0",
        "serverInfo": {"name": "demo", "version": "9"},
        "capabilities": {"streaming": True, "tools": True},
    }


BAD_PARAMS: list[tuple[Any, Any]] = [
    (acp.parse_new_session, None),
    (acp.parse_new_session, {"cwd": 3, "mcpServers": []}),
    (acp.parse_new_session, {"cwd": "/", "mcpServers": "x"}),
    (acp.parse_load_session, {"cwd": "/", "mcpServers": []}),
    (acp.parse_prompt, {"sessionId": "s"}),
    (acp.parse_prompt, {"sessionId": "s", "prompt": "hi"}),
    (acp.parse_prompt, {"sessionId": "s", "prompt": [{"type": "video"}]}),
    (acp.parse_prompt, {"sessionId": "s", "prompt": [{"type": "text"}]}),
    (acp.parse_prompt, {"sessionId": "s", "prompt": [], "payment_token": 5}),
    (acp.parse_prompt, ["positional"]),
    (acp.parse_cancel, {}),
    (acp.parse_prompt_submit, {"messages": []}),
    (acp.parse_prompt_submit, {"messages": [{"role": "tool", "content": "x"}]}),
    (acp.parse_tools_call, {"name": "x", "arguments": []}),
    (acp.parse_tools_call, {}),
]


@pytest.mark.parametrize(("parse", "params"), BAD_PARAMS)
def test_bad_params_are_invalid_params(parse: Any, params: Any) -> None:
    with pytest.raises(rpc.JSONRPCError) as info:
        parse(params)
    assert info.value.code == rpc.INVALID_PARAMS


def test_initialize_rejects_non_integer_version() -> None:
    with pytest.raises(rpc.JSONRPCError):
        acp.initialize_result(
            {"protocolVersion": True},
            agent_name="a",
            version="1",
            capabilities=CAPS,
            load_session=False,
        )


def test_prompt_blocks_become_content_items() -> None:
    parsed = acp.parse_prompt(
        {
            "sessionId": "s1",
            "prompt": [
                {"type": "text", "text": "look "},
                {"type": "image", "data": "aGk=", "mimeType": "image/png"},
                {"type": "audio", "data": "AAA=", "mimeType": "audio/wav"},
                {"type": "resource_link", "uri": "file:///src/a.py", "name": "a.py"},
                {
                    "type": "resource",
                    "resource": {"uri": "file:///b.txt", "text": "hi", "mimeType": "text/plain"},
                },
            ],
            "_meta": {"payment_token": "tok"},
        }
    )
    assert parsed.session_id == "s1" and parsed.payment_token == "tok"
    msg = parsed.message
    assert msg.role == "user" and msg.text == "look "
    items = msg.content_items or []
    assert [type(i).__name__ for i in items] == [
        "TextContent",
        "ImageContent",
        "AudioContent",
        "FileContent",
        "FileContent",
    ]
    image, audio, link, embedded = items[1:]
    assert isinstance(image, ty.ImageContent) and image.format == "png" and image.image == "aGk="
    assert isinstance(audio, ty.AudioContent) and audio.format == "wav"
    assert isinstance(link, ty.FileContent) and link.file == ty.MediaURL(url="file:///src/a.py")
    assert isinstance(embedded, ty.FileContent) and embedded.file == "aGk="
    assert embedded.filename == "b.txt"
    # A text-only prompt stays a plain string message.
    plain = acp.parse_prompt({"sessionId": "s", "prompt": [{"type": "text", "text": "a"}]})
    assert plain.message == ty.Message(role="user", content="a")
    # The spec's own param name wins over _meta.
    both = acp.parse_prompt(
        {"sessionId": "s", "prompt": [], "payment_token": "a", "_meta": {"payment_token": "b"}}
    )
    assert both.payment_token == "a"


def test_prompt_submit_messages() -> None:
    parsed = acp.parse_prompt_submit(
        {
            "messages": [
                {"role": "system", "content": "be nice"},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            ],
            "payment_token": "t",
        }
    )
    assert [m.role for m in parsed.messages] == ["system", "user"]
    assert parsed.messages[1].text == "hi" and parsed.payment_token == "t"


def _delta(delta: ty.Delta) -> ev.ResponseDelta:
    return ev.ResponseDelta(delta=delta)


def test_update_encoder_table() -> None:
    enc = acp.UpdateEncoder()
    fragment = ty.ToolCallFragment(id="c1", name="search", arguments='{"q":')
    table: list[tuple[ev.Event, list[dict[str, Any]]]] = [
        (ev.ResponseCreated(response_id="r"), []),
        (
            _delta(ty.DeltaText(text="Hi")),
            [{"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hi"}}],
        ),
        (_delta(ty.DeltaText(text="")), []),
        (
            ev.Thinking(content="hmm", is_delta=True),
            [{"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"}}],
        ),
        (ev.Thinking(content="secret", redacted=True), []),
        (
            _delta(ty.DeltaToolCall(tool_call=fragment)),
            [
                {
                    "sessionUpdate": "tool_call",
                    "toolCallId": "c1",
                    "title": "search",
                    "kind": "other",
                    "status": "in_progress",
                }
            ],
        ),
        (_delta(ty.DeltaToolCall(tool_call=ty.ToolCallFragment(id="c1", arguments='"x"}'))), []),
        (
            _delta(ty.DeltaToolProgress(tool_progress=ty.ToolProgress(call_id="c1", text="50%"))),
            [
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": "c1",
                    "status": "in_progress",
                    "content": [{"type": "content", "content": {"type": "text", "text": "50%"}}],
                }
            ],
        ),
        (
            _delta(
                ty.DeltaToolResult(
                    tool_result=ty.ToolResultFragment(call_id="c1", result="found", status="ok")
                )
            ),
            [
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": "c1",
                    "status": "completed",
                    "rawOutput": "found",
                    "rawInput": {"q": "x"},
                    "content": [{"type": "content", "content": {"type": "text", "text": "found"}}],
                }
            ],
        ),
        (ev.ToolCallDone(call_id="c1"), []),  # already completed
        (
            ev.ToolCall(call_id="c2", name="client_tool", arguments='{"a":1}'),
            [
                {
                    "sessionUpdate": "tool_call",
                    "toolCallId": "c2",
                    "title": "client_tool",
                    "kind": "other",
                    "status": "pending",
                    "rawInput": {"a": 1},
                }
            ],
        ),
        (ev.UsageDelta(delta=ty.UsageStats(input_tokens=1)), []),
    ]
    for event, expected in table:
        assert enc.feed(event) == expected, event
    failed = enc.unanswered(["c2"])
    assert failed[0]["status"] == "failed" and failed[0]["toolCallId"] == "c2"


def test_failed_tool_result_and_done_without_result() -> None:
    enc = acp.UpdateEncoder()
    result = ty.ToolResultFragment(call_id="x", result="boom", status="error")
    updates = enc.feed(_delta(ty.DeltaToolResult(tool_result=result)))
    assert [u["sessionUpdate"] for u in updates] == ["tool_call", "tool_call_update"]
    assert updates[1]["status"] == "failed"
    enc.feed(_delta(ty.DeltaToolCall(tool_call=ty.ToolCallFragment(id="y", name="t"))))
    assert enc.feed(ev.ToolCallDone(call_id="y")) == [
        {"sessionUpdate": "tool_call_update", "toolCallId": "y", "status": "completed"}
    ]


@pytest.mark.parametrize(
    ("status", "code", "reason"),
    [
        ("completed", None, "end_turn"),
        ("requires_action", None, "end_turn"),
        ("cancelled", None, "cancelled"),
        ("failed", "refusal", "refusal"),
        ("failed", "content_filter", "refusal"),
        ("failed", "max_tokens", "max_tokens"),
        ("failed", "internal_error", None),
    ],
)
def test_stop_reason(status: str, code: str | None, reason: str | None) -> None:
    assert acp.stop_reason(status, code) == reason


def test_usage_and_payment_error() -> None:
    assert acp.usage_object(None) is None
    assert acp.usage_object(ty.UsageStats(input_tokens=3, output_tokens=4)) == {
        "inputTokens": 3,
        "outputTokens": 4,
        "totalTokens": 7,
    }
    req = ty.PaymentRequirements(amount="0.5", currency="USD", reason="usage")
    err = acp.payment_error(PaymentRequiredError(req))
    assert err.code == -32402
    assert err.data["accepts"] == [{"scheme": "token", "amount": "0.5", "currency": "USD"}]


def test_history_updates_replay_a_conversation() -> None:
    messages = [
        ty.Message(role="system", content="ignored"),
        ty.Message(role="user", content="find x"),
        ty.Message(
            role="assistant",
            content="Looking.",
            tool_calls=[ty.ToolInvocation(id="c", name="search", arguments='{"q":"x"}')],
        ),
        ty.Message(role="tool", content="x is 1", tool_call_id="c"),
        ty.Message(role="assistant", content="x is 1."),
    ]
    kinds = [u["sessionUpdate"] for u in acp.history_updates(messages)]
    assert kinds == [
        "user_message_chunk",
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
    ]


def test_tools_list_from_capabilities() -> None:
    assert [t["name"] for t in acp.tools_list_result(CAPS)["tools"]] == ["search", "calc"]


def _history(*roles: str, size: int = 100) -> list[ty.Message]:
    return [ty.Message(role=role, content=f"{n}" + "x" * size) for n, role in enumerate(roles)]


@pytest.mark.parametrize(
    ("roles", "bounds", "kept"),
    [
        # Within both bounds: nothing dropped.
        (("user", "assistant"), {"max_messages": 4, "max_bytes": 10_000}, 2),
        # Past the message count: the oldest go, from a user message on.
        (("user", "assistant") * 3, {"max_messages": 4, "max_bytes": 10_000}, 4),
        (("user", "assistant") * 3, {"max_messages": 3, "max_bytes": 10_000}, 2),
        # A tool result is never kept without the call before it.
        (("user", "assistant", "tool", "assistant"), {"max_messages": 3}, 0),
        # Past the byte budget (each message ~101 bytes).
        (("user", "assistant") * 3, {"max_bytes": 450}, 4),
        (("user", "assistant") * 3, {"max_bytes": 250}, 2),
        # One message over the budget alone: nothing is kept.
        (("user",), {"max_bytes": 50}, 0),
    ],
)
def test_trim_history_keeps_the_newest_within_both_bounds(
    roles: tuple[str, ...], bounds: dict[str, int], kept: int
) -> None:
    messages = _history(*roles)
    newest = messages[len(messages) - kept :]
    acp.trim_history(messages, **bounds)
    assert messages == newest
    assert not messages or messages[0].role == "user"
