"""The 401 refusal a route answers in its own error style, as the tests expect it."""

from __future__ import annotations

import uuid
from typing import Any

import orjson

#: The JSON-RPC error code of an authentication refusal.
JSONRPC_UNAUTHORIZED = -32000


def assert_unauthorized(
    style: str, status: int, headers: Any, body: bytes, *, challenge: str, message: str | None
) -> None:
    """A 401 with ``challenge`` in ``WWW-Authenticate`` and the ``unauthorized``
    code in ``style``'s error shape (``openai``, ``jsonrpc``, ``uamp``, AIP-193 for
    ``a2a_rest``, or a
    spec 003 ``error`` envelope with code 4.01 for ``envelope``);
    Anthropic's ``authentication_error`` for ``anthropic``; ``message``, when
    given, is the exact message the body carries, and then a
    JSON-RPC or UAMP body must hold nothing else. In the ``grpc`` style the
    refusal is trailers-only: HTTP 200, ``grpc-status`` 16 (UNAUTHENTICATED)
    and the message in ``grpc-message``, no body."""
    if style == "grpc":
        from uamp_proto.grpc import decode_message_text

        fields = dict(headers)
        assert (status, body) == (200, b"")
        assert fields["content-type"] == "application/grpc"
        assert fields["grpc-status"] == "16"
        assert fields["www-authenticate"] == challenge
        if message is not None:
            assert decode_message_text(fields["grpc-message"]) == message
        return
    assert status == 401
    assert dict(headers)["www-authenticate"] == challenge
    obj = orjson.loads(body)
    if style == "anthropic":
        assert set(obj) == {"type", "error"} and obj["type"] == "error"
        error = obj["error"]
        assert error["type"] == "authentication_error"
        assert set(error) == {"type", "message"}
    elif style == "openai":
        error = obj["error"]
        assert (error["code"], error["type"]) == ("unauthorized", "invalid_request_error")
    elif style == "jsonrpc":
        assert (obj["jsonrpc"], obj["id"]) == ("2.0", None)
        error = obj["error"]
        assert error["code"] == JSONRPC_UNAUTHORIZED
        assert error["data"] == {"status": 401, "code": "unauthorized"}
    elif style == "a2a_rest":
        error = obj["error"]  # AIP-193, as A2A 1.0 section 11.6 shapes HTTP+JSON errors
        assert (error["code"], error["status"]) == (401, "UNAUTHENTICATED")
        (info,) = error["details"]
        assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
        assert (info["reason"], info["domain"]) == ("UNAUTHORIZED", "uamp.dev")
        assert set(obj) == {"error"} and set(error) == {"code", "status", "message", "details"}
    elif style == "envelope":
        from uamp_proto.adapters.envelope import read_error
        from uamp_proto.envelope import Intent, decode_envelope

        envelope = decode_envelope(body)
        assert envelope.intent is Intent.ERROR
        code, text, retry = read_error(envelope)
        assert (code, retry) == ("4.01", False)
        if message is not None:
            assert text == message
        return
    else:
        assert style == "uamp"
        assert obj["type"] == "session.error"
        assert str(uuid.UUID(obj["event_id"])) == obj["event_id"]  # UAMP 4: every event has one
        error = obj["error"]
        assert error["code"] == "unauthorized"
    if message is not None:
        assert error["message"] == message
        exact = {
            "jsonrpc": ({"jsonrpc", "id", "error"}, {"code", "message", "data"}),
            "uamp": ({"type", "event_id", "error"}, {"code", "message"}),
        }.get(style)
        if exact is not None:
            assert (set(obj), set(error)) == exact
