"""The MCP adapter: version negotiation, the agent's tool, call parsing and results."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from uamp_proto import jsonrpc as rpc
from uamp_proto import types as ty
from uamp_proto.adapters import mcp
from uamp_proto.payment import PaymentRequiredError


@pytest.mark.parametrize(
    ("asked", "answered"),
    [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2024-11-05", "2024-11-05"),
        ("2026-07-28", "2025-11-25"),  # the stateless revision is not ours
        ("1999-01-01", "2025-11-25"),
        ("", "2025-11-25"),
    ],
)
def test_negotiation_answers_the_clients_version_or_our_latest(asked: str, answered: str) -> None:
    assert mcp.negotiate({"protocolVersion": asked}) == answered


@pytest.mark.parametrize("params", [None, {}, {"protocolVersion": 20251125}, [1]])
def test_negotiation_needs_a_version_string(params: Any) -> None:
    with pytest.raises(rpc.JSONRPCError) as caught:
        mcp.negotiate(params)
    assert caught.value.code == rpc.INVALID_PARAMS


def test_initialize_declares_tools_only() -> None:
    result = mcp.initialize_result("2025-06-18", agent_name="demo", server_version="1")
    assert result == {
        "protocolVersion": "2025-06-18",
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": "demo", "version": "1"},
    }


@pytest.mark.parametrize(
    ("agent", "tool"),
    [("demo", "demo"), ("alice.my-bot", "alice.my-bot"), ("a~b", "a_b"), ("x" * 200, "x" * 128)],
)
def test_the_tool_is_named_after_the_agent(agent: str, tool: str) -> None:
    listed = mcp.tools_list_result(agent)["tools"]
    assert [t["name"] for t in listed] == [tool]
    assert listed[0]["inputSchema"]["required"] == ["prompt"]


def _call(arguments: Any, meta: Any = None, name: str = "demo") -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    return params


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (_call({"prompt": "hi"}), mcp.CallParams(prompt="hi")),
        (_call({"prompt": "hi", "session": "s"}), mcp.CallParams(prompt="hi", session="s")),
        (
            _call({"prompt": "hi"}, {"progressToken": 7, "payment_token": "tok"}),
            mcp.CallParams(prompt="hi", progress_token=7, payment_token="tok"),
        ),
        (_call({"prompt": "hi"}, {"progressToken": True}), mcp.CallParams(prompt="hi")),
        (_call({"prompt": "hi"}, "not an object"), mcp.CallParams(prompt="hi")),
    ],
)
def test_calls_are_read(params: dict[str, Any], expected: mcp.CallParams) -> None:
    assert mcp.parse_call(params, "demo") == expected


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        None,
        {"prompt": ""},
        {"prompt": 3},
        {"prompt": "x", "session": ""},
        {"prompt": "x", "session": 5},
        {"prompt": "x", "session": "s" * 129},
    ],
)
def test_bad_arguments_are_a_tool_error_not_a_protocol_fault(arguments: Any) -> None:
    parsed = mcp.parse_call(_call(arguments), "demo")
    assert parsed.prompt is None and parsed.problem


@pytest.mark.parametrize(
    "params", [None, [], {"arguments": {}}, _call({"prompt": "x"}, name="other"), _call([1])]
)
def test_protocol_faults_are_jsonrpc_errors(params: Any) -> None:
    with pytest.raises(rpc.JSONRPCError) as caught:
        mcp.parse_call(params, "demo")
    assert caught.value.code == rpc.INVALID_PARAMS


@pytest.mark.parametrize(
    ("text", "structured"),
    [
        ("plain", None),
        ('{"a": 1}', {"a": 1}),
        ('  {"a": [1, 2]}\n', {"a": [1, 2]}),
        ("[1, 2]", None),
        ("{not json", None),
    ],
)
def test_a_json_object_reply_is_also_structured(text: str, structured: Any) -> None:
    result = mcp.call_result(text)
    assert result["content"] == [{"type": "text", "text": text}]
    assert result.get("structuredContent") == structured
    assert result["isError"] is False


def test_results_echo_the_session_and_meta() -> None:
    result = mcp.call_result("x", session="s1", meta={"signature": "jwt"})
    assert result["_meta"] == {"signature": "jwt", "session": "s1"}
    assert "_meta" not in mcp.call_result("x")


def test_payment_result_names_the_price() -> None:
    requirements = ty.PaymentRequirements(amount="0.25", currency="USD", reason="agent_usage")
    result = mcp.payment_result(PaymentRequiredError(requirements))
    assert result["isError"] is True
    assert "0.25 USD" in result["content"][0]["text"]
    assert result["_meta"]["payment"]["accepts"][0]["amount"] == "0.25"


@given(st.lists(st.text(max_size=20), max_size=30))
def test_progress_grows_and_carries_each_delta(deltas: list[str]) -> None:
    progress = mcp.Progress("tok")
    notes = [n for n in (progress.feed(d) for d in deltas) if n is not None]
    assert [n.params["message"] for n in notes] == [d for d in deltas if d]  # type: ignore[index]
    values = [n.params["progress"] for n in notes]  # type: ignore[index]
    assert values == sorted(set(values))
    assert all(n.params["progressToken"] == "tok" for n in notes)  # type: ignore[index]
    assert (
        orjson.loads(rpc.encode(notes[0]))["method"] == "notifications/progress" if notes else True
    )


_tokens = st.one_of(st.text(max_size=12), st.integers(min_value=-(2**63), max_value=2**63 - 1))


@given(
    token=_tokens,
    deltas=st.lists(st.text(max_size=20), max_size=30),
    before=st.binary(max_size=8),
    after=st.binary(max_size=8),
)
def test_encoded_progress_is_the_general_paths_bytes(
    token: str | int, deltas: list[str], before: bytes, after: bytes
) -> None:
    fast = mcp.Progress(token, before=before, after=after)
    general = mcp.Progress(token)
    for delta in deltas:
        note = general.feed(delta)
        data = fast.encoded(delta)
        if note is None:
            assert data is None
        else:
            assert data == before + rpc.encode(note) + after
    assert fast.chars == general.chars


@pytest.mark.parametrize(
    ("params", "request_id"),
    [
        ({"requestId": 3}, 3),
        ({"requestId": "a"}, "a"),
        ({"requestId": True}, None),
        ({"requestId": None}, None),
        ({}, None),
        (None, None),
        ([3], None),
    ],
)
def test_cancelled_names_its_request(params: Any, request_id: Any) -> None:
    assert mcp.cancelled_request(params) == request_id
