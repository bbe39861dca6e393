"""Hypothesis strategies for JSON bodies and events shaped like each protocol's, and the budget.

Every strategy mixes the protocol's own shape (the field names and the values
a server expects) with arbitrary JSON in any slot, so examples get past the
first checks and reach deeper code. ``UAMP_FUZZ_LONG=1`` multiplies every
example budget by :data:`LONG_FACTOR` (the on-demand long run);
``UAMP_FUZZ_LONG=N`` (N > 1) by N.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import strategies as st

#: How many times more examples the long run (``UAMP_FUZZ_LONG=1``) takes.
LONG_FACTOR = 100


def _factor() -> int:
    raw = os.environ.get("UAMP_FUZZ_LONG", "")
    if not raw.isdigit() or int(raw) < 1:
        return 1
    return LONG_FACTOR if int(raw) == 1 else int(raw)


FACTOR = _factor()


def examples(count: int) -> int:
    """``count`` examples, times :data:`FACTOR` (1, or the long run's)."""
    return count * FACTOR


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=24)
)

#: Any JSON value (no NaN: the encoder would write what no decoder reads).
json_values: st.SearchStrategy[Any] = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def either(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The expected kind of value, or any JSON value at all."""
    return st.one_of(strategy, strategy, json_values)


def shaped(
    required: dict[str, st.SearchStrategy[Any]],
    optional: dict[str, st.SearchStrategy[Any]] | None = None,
) -> st.SearchStrategy[Any]:
    """An object with the protocol's keys (each value possibly anything), or any JSON value."""
    obj = st.fixed_dictionaries(
        {k: either(v) for k, v in required.items()},
        optional={k: either(v) for k, v in (optional or {}).items()},
    )
    # Deferred: its repr stays one line (the nested one runs to megabytes).
    return st.deferred(lambda: st.one_of(obj, obj, obj, json_values))


def words(*choices: str) -> st.SearchStrategy[str]:
    """One of ``choices`` or a short text."""
    return st.sampled_from(choices) | st.text(max_size=12)


_text = st.text(max_size=40)
_ids = st.text(alphabet="abc123-", min_size=1, max_size=12)

# --- OpenAI Chat Completions ---------------------------------------------------------------

_content_part = shaped(
    {"type": words("text", "image_url", "input_audio", "file")},
    {"text": _text, "image_url": shaped({"url": _text}), "input_audio": json_values},
)
_tool_call = shaped(
    {"id": _ids, "type": words("function"), "function": shaped({"name": _ids, "arguments": _text})}
)
chat_message = shaped(
    {"role": words("user", "system", "assistant", "tool", "developer")},
    {
        "content": _text | st.lists(_content_part, max_size=3),
        "tool_calls": st.lists(_tool_call, max_size=2),
        "tool_call_id": _ids,
        "name": _ids,
    },
)
_tool = shaped(
    {"type": words("function"), "function": shaped({"name": _ids}, {"parameters": json_values})}
)
completions_body = shaped(
    {"model": words("fz"), "messages": st.lists(chat_message, max_size=3)},
    {
        "stream": st.booleans(),
        "tools": st.lists(_tool, max_size=2),
        "tool_choice": words("auto", "none", "required"),
        "max_tokens": st.integers(),
        "n": st.integers(),
        "temperature": st.floats(allow_nan=False),
        "stream_options": shaped({"include_usage": st.booleans()}),
        "response_format": shaped({"type": words("text", "json_object", "json_schema")}),
        "user": _text,
        "metadata": json_values,
    },
)

# --- A2A -------------------------------------------------------------------------------------

_a2a_part = shaped(
    {"kind": words("text", "file", "data")},
    {"text": _text, "file": json_values, "data": json_values, "mediaType": _text},
)
a2a_message = shaped(
    {"role": words("user", "agent", "ROLE_USER"), "parts": st.lists(_a2a_part, max_size=3)},
    {
        "messageId": _ids,
        "taskId": _ids,
        "contextId": _ids,
        "kind": words("message"),
        "metadata": json_values,
    },
)
a2a_params = shaped(
    {"message": a2a_message},
    {
        "id": _ids,
        "configuration": json_values,
        "metadata": json_values,
        "historyLength": st.integers(),
    },
)


def rpc(methods: tuple[str, ...], params: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A JSON-RPC 2.0 request of one of ``methods`` (each slot possibly anything)."""
    return shaped(
        {"jsonrpc": words("2.0"), "id": st.integers() | _ids, "method": words(*methods)},
        {"params": params},
    )


a2a_rpc = rpc(
    (
        "message/send",
        "message/stream",
        "tasks/get",
        "tasks/cancel",
        "tasks/resubscribe",
        "tasks/pushNotificationConfig/set",
        "agent/getAuthenticatedExtendedCard",
        "SendMessage",
        "SendStreamingMessage",
        "GetTask",
        "CancelTask",
        "ListTasks",
        "SubscribeToTask",
    ),
    a2a_params,
)

# --- ACP ----------------------------------------------------------------------------------------

_acp_block = shaped({"type": words("text", "image", "resource", "resource_link")}, {"text": _text})
acp_rpc = rpc(
    (
        "initialize",
        "authenticate",
        "session/new",
        "session/load",
        "session/prompt",
        "session/cancel",
        "session/set_mode",
    ),
    shaped(
        {},
        {
            "protocolVersion": st.integers(),
            "sessionId": _ids,
            "cwd": _text,
            "mcpServers": st.lists(json_values, max_size=2),
            "prompt": st.lists(_acp_block, max_size=3),
            "methodId": _text,
            "_meta": json_values,
        },
    ),
)

# --- AG-UI ----------------------------------------------------------------------------------------

agui_body = shaped(
    {
        "threadId": _ids,
        "runId": _ids,
        "messages": st.lists(
            shaped(
                {"id": _ids, "role": words("user", "assistant", "system", "tool", "developer")},
                {
                    "content": _text,
                    "toolCalls": st.lists(json_values, max_size=2),
                    "toolCallId": _ids,
                },
            ),
            max_size=3,
        ),
    },
    {
        "tools": st.lists(json_values, max_size=2),
        "context": st.lists(json_values, max_size=2),
        "state": json_values,
        "forwardedProps": json_values,
    },
)

# --- UAMP events ------------------------------------------------------------------------------

UAMP_CLIENT_TYPES = (
    "session.create",
    "session.update",
    "session.end",
    "capabilities.query",
    "client.capabilities",
    "input.text",
    "input.audio",
    "input.image",
    "input.video",
    "input.file",
    "input.typing",
    "response.create",
    "response.cancel",
    "tool.result",
    "payment.submit",
    "ping",
    "message.read",
    "progress",
)
uamp_event = shaped(
    {"type": words(*UAMP_CLIENT_TYPES)},
    {
        "session_id": _ids,
        "text": _text,
        "uamp_version": words("1.0"),
        "session": shaped({"modalities": st.lists(words("text", "audio"), max_size=2)}),
        "response_id": _ids,
        "call_id": _ids,
        "result": json_values,
        "is_error": st.booleans(),
        "token": _text,
        "payment_token": _text,
        "audio": _text,
        "format": _text,
        "target": _text,
        "step": st.integers(),
        "delta_seq": st.integers(),
        "stage": _text,
        "agent": _text,
        "response": json_values,
    },
)

# --- OpenAI Realtime ----------------------------------------------------------------------------

realtime_event = shaped(
    {
        "type": words(
            "session.update",
            "input_audio_buffer.append",
            "input_audio_buffer.commit",
            "input_audio_buffer.clear",
            "conversation.item.create",
            "conversation.item.delete",
            "conversation.item.retrieve",
            "conversation.item.truncate",
            "response.create",
            "response.cancel",
            "payment.submit",
            "voice.end",
        )
    },
    {
        "event_id": _ids,
        "session": json_values,
        "audio": _text,
        "call_id": _ids,
        "reason": _text,
        "item_id": _ids,
        "content_index": st.integers(),
        "audio_end_ms": st.integers(),
        "previous_item_id": _ids,
        "item": shaped(
            {"type": words("message", "function_call", "function_call_output")},
            {
                "role": words("user", "assistant", "system"),
                "content": st.lists(
                    shaped({"type": words("input_text", "input_audio", "text")}, {"text": _text}),
                    max_size=2,
                ),
                "call_id": _ids,
                "name": _ids,
                "arguments": _text,
                "output": _text,
            },
        ),
        "response": json_values,
    },
)

#: Bytes that are not JSON, or not quite: every JSON entry point also gets these.
broken_json = st.sampled_from(
    [b"", b"{", b"[1,", b'{"a":NaN}', b"\xff\xfe", b'{"a":1}x', b"nul", b'"\\ud800"', b"1e999"]
) | st.binary(max_size=40)
