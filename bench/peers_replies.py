"""What the model of ``bench/peers.py`` answers, for every setup.

Shared by the mock model server (``--serve model``, over HTTP), the in-process
model of the uamp peer (``peers_agent.peer_local``, on the ``function``
model) and the in-process LLM skill of the webagents peer
(``peers_webagents.py --local``), so the three answer alike. Plain Python:
it also runs inside webagents' own virtualenv.

The reply comes from the last user message: ``plain`` gets five words;
``stream N`` gets ``N`` words, one per chunk when streamed; ``tool`` gets a
call of ``lookup`` first and, once the conversation holds its result,
twenty words.
"""

from __future__ import annotations

from typing import Any

WORD = "tok "
CREATED = 1700000000


def mock_reply(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """What the model says to OpenAI-style ``messages``: (text, tool calls)."""
    last_user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    content = last_user.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    text = str(content or "").strip()
    if text == "tool":
        if any(m.get("role") == "tool" for m in messages):
            return WORD * 20, []
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "lookup", "arguments": '{"key": "k"}'},
        }
        return "", [call]
    words = text.split()
    if len(words) == 2 and words[0] == "stream" and words[1].isdigit():
        return WORD * int(words[1]), []
    return WORD * 5, []


def _usage(text: str) -> dict[str, int]:
    out = len(text.split())
    return {"prompt_tokens": 10, "completion_tokens": out, "total_tokens": 10 + out}


def _chunk(cid: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "mock",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def stream_chunks(messages: list[dict[str, Any]], include_usage: bool) -> list[dict[str, Any]]:
    """The reply as Chat Completions chunks: the role, the tool call, one word each, the end."""
    text, calls = mock_reply(messages)
    cid = "chatcmpl-mock"
    parts = [_chunk(cid, {"role": "assistant", "content": ""})]
    if calls:
        parts.append(_chunk(cid, {"tool_calls": [{"index": 0, **calls[0]}]}))
    parts.extend(_chunk(cid, {"content": w + " "}) for w in text.split(" ") if w)
    parts.append(_chunk(cid, {}, "tool_calls" if calls else "stop"))
    if include_usage:
        parts.append(
            {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": "mock",
                "choices": [],
                "usage": _usage(text),
            }
        )
    return parts


def completion(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The reply as one Chat Completion."""
    text, calls = mock_reply(messages)
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": CREATED,
        "model": "mock",
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": _usage(text),
    }
