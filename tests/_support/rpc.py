"""Request bodies the server tests send: JSON-RPC requests, A2A messages, AG-UI runs."""

from __future__ import annotations

from typing import Any


def rpc(method: str, params: Any = None, rid: Any = 1) -> dict[str, Any]:
    """A JSON-RPC 2.0 request (``params`` left out when ``None``)."""
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        body["params"] = params
    return body


def a2a_message(text: str, **extra: Any) -> dict[str, Any]:
    """A user's text message in A2A 0.3 form; ``extra`` adds members (``taskId`` ...)."""
    part = {"kind": "text", "text": text}
    return {"kind": "message", "messageId": "m1", "role": "user", "parts": [part], **extra}


def a2a_v1_message(text: str, **extra: Any) -> dict[str, Any]:
    """The same message in A2A 1.0 form."""
    return {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text}], **extra}


def agui_run(text: str, **extra: Any) -> dict[str, Any]:
    """An AG-UI ``RunAgentInput`` with one user message; ``extra`` adds or replaces members."""
    return {
        "threadId": "t1",
        "runId": "r1",
        "messages": [{"id": "m1", "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
        **extra,
    }
