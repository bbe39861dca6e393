"""What one request looks like on each HTTP transport, and how to read its stream.

A :class:`Dialect` builds a request body and reads the answer's server-sent
events one at a time, saying for each whether it carried content (a delta),
ended the response, or reported an error. No I/O here: the HTTP driver
(:mod:`.drivers`) does the sending and the timing.

* ``openai`` -- Chat Completions: ``delta.content`` (or reasoning) chunks,
  ``[DONE]`` ends, an ``error`` object fails;
* ``responses`` -- the OpenAI Responses API: ``response.output_text.delta``
  events, ``response.completed`` (or ``response.incomplete``) ends,
  ``response.failed`` and ``error`` events fail;
* ``agui`` -- AG-UI ``RunAgentInput``: ``TEXT_MESSAGE_CONTENT`` deltas,
  ``RUN_FINISHED`` ends, ``RUN_ERROR`` fails;
* ``a2a`` -- A2A 1.0 JSON-RPC ``SendStreamingMessage`` (ProtoJSON: results
  wrapped as ``{"artifactUpdate"}``, ``{"statusUpdate"}``, ``{"task"}``,
  states as ``TASK_STATE_COMPLETED``); ``a2a-0.3`` -- the same over A2A 0.3's
  ``message/stream`` (``kind``-tagged results, lower-case states, ``final``
  on the closing status). Either way, text parts of artifact updates are
  deltas (a last chunk that repeats the whole text is not, unless nothing
  streamed before it), the closing status ends (``failed`` / ``canceled`` /
  ``rejected`` / ``auth-required`` fail, and so does an ``input-required``
  pause), a JSON-RPC ``error`` fails. A 1.0 status update has no ``final``:
  a terminal or interrupted state closes the stream.
* ``ai-sdk`` -- the Vercel AI SDK's UI message stream: ``text-delta`` (or
  ``reasoning-delta``) chunks, ``finish`` ends (a ``finishReason`` other than
  ``stop``, ``length`` or ``tool-calls`` fails), an ``error`` chunk fails;
* ``anthropic`` -- the Anthropic Messages API (``POST .../v1/messages`` with
  ``anthropic-version``): ``text_delta`` (or ``thinking_delta``) events,
  ``message_stop`` ends, an ``error`` event fails with its type.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import attrs
import orjson

from .config import BenchConfig, chat_completions_url, endpoint_url
from .workload import Turn

__all__ = ["DIALECTS", "Dialect", "Step"]


@attrs.frozen
class Step:
    """What one event of a stream meant.

    Attributes:
        text: Content it carried ("" for none).
        done: The response ended well.
        error: The response failed with this kind.
        tool: The name of a tool call it started (the agent's, or one for the client).
    """

    text: str = ""
    done: bool = False
    error: str | None = None
    tool: str | None = None


_NOTHING = Step()
_DONE = Step(done=True)


def _json(data: str) -> dict[str, Any] | None:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _bad() -> Step:
    return Step(error="bad_response")


class Dialect:
    """One transport's request and stream reading; a new :meth:`reader` per response."""

    name = ""
    #: Headers every request of this dialect carries.
    headers: tuple[tuple[str, str], ...] = ()

    def endpoint(self, config: BenchConfig) -> str:
        """Where the requests go."""
        raise NotImplementedError

    def body(self, config: BenchConfig, turn: Turn, said: Sequence[Any] = ()) -> bytes:
        """The body of one request: ``turn`` of its conversation (``said``: the client
        tool calls answered so far, in the dialect's own form)."""
        raise NotImplementedError

    def reader(self) -> Reader:
        """A reader for one response's events."""
        return Reader(self)

    def step(self, data: str, reader: Reader) -> Step:
        """What the ``data`` of one event means."""
        raise NotImplementedError

    def whole(self, body: bytes) -> Step:
        """The content of a response that was not streamed."""
        return _bad()

    def answer(
        self, config: BenchConfig, turn: Turn, reader: Reader, said: list[Any]
    ) -> bytes | None:
        """The request that answers the client tool calls ``reader`` saw, continuing
        ``turn`` (``said``: the calls and answers so far, extended here); ``None``
        when there is none to answer."""
        if not reader.calls:
            return None
        calls = list(reader.calls.values())  # in the order they came
        said += self.answered(turn, calls)
        return self.body(config, turn, said)

    def answered(self, turn: Turn, calls: list[dict[str, str]]) -> list[Any]:
        """``calls`` (``{"id", "name", "arguments"}``) and their results, as the next
        request carries them (only the dialects with client tools fill ``calls``)."""
        raise NotImplementedError


class Reader:
    """Reads one response's events (holds what a dialect needs across them).

    ``calls``: the client tool calls the response made, by index or id, each
    ``{"id", "name", "arguments"}`` (the dialects with client tools fill it).
    """

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.streamed = False
        self.calls: dict[Any, dict[str, str]] = {}

    def step(self, data: str) -> Step:
        """What the ``data`` of the next event means."""
        step = self.dialect.step(data, self)
        if step.text:
            self.streamed = True
        return step


class OpenAI(Dialect):
    """OpenAI Chat Completions (``POST .../chat/completions``)."""

    name = "openai"

    def endpoint(self, config: BenchConfig) -> str:
        return chat_completions_url(config.url, config.agent)

    def body(self, config: BenchConfig, turn: Turn, said: Sequence[Any] = ()) -> bytes:
        body: dict[str, Any] = {
            "model": config.model or config.agent or _agent_in(config.url) or "uamp",
            "messages": [*turn.messages(), *said],
            "stream": config.stream,
        }
        limit = turn.max_tokens or config.max_tokens
        if limit is not None:
            body["max_tokens"] = limit
        if turn.tools:
            body["tools"] = list(turn.tools)
        return orjson.dumps(body)

    def answered(self, turn: Turn, calls: list[dict[str, str]]) -> list[Any]:
        asked = [
            {"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ]  # fmt: skip
        return [
            {"role": "assistant", "content": None, "tool_calls": asked},
            *({"role": "tool", "tool_call_id": c["id"], "content": turn.tool_result(c["name"])}
              for c in calls),
        ]  # fmt: skip

    def step(self, data: str, reader: Reader) -> Step:
        if data.strip() == "[DONE]":
            return _DONE
        chunk = _json(data)
        if chunk is None:
            return _bad()
        if "error" in chunk:
            return Step(error="stream_error")
        try:
            delta = chunk["choices"][0]["delta"]
        except (LookupError, TypeError):
            return _NOTHING
        if not isinstance(delta, dict):
            return _NOTHING
        text = delta.get("content") or delta.get("reasoning_content") or ""
        started = _openai_calls(delta.get("tool_calls"), reader)
        return Step(text=text if isinstance(text, str) else "", tool=started)

    def whole(self, body: bytes) -> Step:
        try:
            message = orjson.loads(body)["choices"][0]["message"]
        except (orjson.JSONDecodeError, LookupError, TypeError):
            return _bad()
        text = message.get("content") if isinstance(message, dict) else None
        return Step(text=text if isinstance(text, str) else "", done=True)


def _openai_calls(pieces: Any, reader: Reader) -> str | None:
    """Add a chunk's ``tool_calls`` pieces to ``reader.calls``; the name of one that started."""
    started = None
    for piece in pieces if isinstance(pieces, list) else ():
        if not isinstance(piece, dict):
            continue
        fresh = {"id": "", "name": "", "arguments": ""}
        call = reader.calls.setdefault(piece.get("index", 0), fresh)
        function = piece.get("function")
        if not isinstance(function, dict):
            function = {}
        if isinstance(piece.get("id"), str):
            call["id"] = piece["id"]
        if isinstance(function.get("name"), str) and function["name"]:
            call["name"] = started = function["name"]
        if isinstance(function.get("arguments"), str):
            call["arguments"] += function["arguments"]
    return started


class Responses(Dialect):
    """The OpenAI Responses API (``POST .../responses``)."""

    name = "responses"

    def endpoint(self, config: BenchConfig) -> str:
        if urlsplit(config.url).path.rstrip("/").endswith("/responses"):
            return config.url
        return (
            chat_completions_url(config.url, config.agent).removesuffix("/chat/completions")
            + "/responses"
        )

    def body(self, config: BenchConfig, turn: Turn, said: Sequence[Any] = ()) -> bytes:
        body: dict[str, Any] = {
            "model": config.model or config.agent or _agent_in(config.url) or "uamp",
            "input": [*turn.messages(), *said] if turn.history or said else turn.prompt,
            "stream": config.stream,
            "store": False,
        }
        limit = turn.max_tokens or config.max_tokens
        if limit is not None:
            body["max_output_tokens"] = limit
        if turn.tools:  # Chat Completions' form -> the Responses one (flat)
            body["tools"] = [{"type": "function", **t["function"]} for t in turn.tools]
        return orjson.dumps(body)

    def answered(self, turn: Turn, calls: list[dict[str, str]]) -> list[Any]:
        items: list[Any] = []
        for call in calls:
            items.append({"type": "function_call", "call_id": call["id"], "name": call["name"],
                          "arguments": call["arguments"]})  # fmt: skip
            items.append({"type": "function_call_output", "call_id": call["id"],
                          "output": turn.tool_result(call["name"])})  # fmt: skip
        return items

    def step(self, data: str, reader: Reader) -> Step:
        event = _json(data)
        if event is None:
            return _bad()
        kind = event.get("type")
        if kind == "response.output_text.delta":
            delta = event.get("delta")
            return Step(text=delta) if isinstance(delta, str) else _bad()
        if kind in ("response.completed", "response.incomplete"):
            return _DONE
        item = event.get("item")
        if isinstance(item, dict) and item.get("type") == "function_call":
            name = str(item.get("name") or "")
            if kind == "response.output_item.added":
                return Step(tool=name or None)
            if kind == "response.output_item.done":
                call_id = str(item.get("call_id") or "")
                arguments = item.get("arguments")
                reader.calls[call_id or len(reader.calls)] = {
                    "id": call_id, "name": name,
                    "arguments": arguments if isinstance(arguments, str) else "{}",
                }  # fmt: skip
        if kind == "error":
            code = event.get("code")
            return Step(error=code if isinstance(code, str) and code else "stream_error")
        if kind == "response.failed":
            return Step(error="response_failed")
        return _NOTHING

    def whole(self, body: bytes) -> Step:
        try:
            response = orjson.loads(body)
            items = response["output"]
        except (orjson.JSONDecodeError, LookupError, TypeError):
            return _bad()
        text = "".join(
            part.get("text", "")
            for item in items
            if isinstance(item, dict) and item.get("type") == "message"
            for part in item.get("content") or ()
            if isinstance(part, dict) and part.get("type") == "output_text"
        )
        return Step(text=text, done=response.get("status") in ("completed", "incomplete"))


class AGUI(Dialect):
    """AG-UI: ``POST .../agui`` with a ``RunAgentInput``, answered with SSE."""

    name = "agui"

    def endpoint(self, config: BenchConfig) -> str:
        return endpoint_url(config.url, config.agent, "agui")

    def body(self, config: BenchConfig, turn: Turn, said: Sequence[Any] = ()) -> bytes:
        return orjson.dumps(
            {
                "threadId": turn.thread,
                "runId": uuid.uuid4().hex,
                "messages": [{"id": uuid.uuid4().hex, **m} for m in turn.messages()],
                "tools": [],
                "context": [],
                "state": {},
                "forwardedProps": {},
            }
        )

    def step(self, data: str, reader: Reader) -> Step:
        event = _json(data)
        if event is None:
            return _bad()
        kind = event.get("type")
        if kind in ("TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CHUNK"):  # a chunk's delta is optional
            delta = event.get("delta", "" if kind == "TEXT_MESSAGE_CHUNK" else None)
            return Step(text=delta) if isinstance(delta, str) else _bad()
        if kind == "RUN_FINISHED":
            return _DONE
        if kind == "TOOL_CALL_START":
            name = event.get("toolCallName")
            return Step(tool=name) if isinstance(name, str) and name else _NOTHING
        if kind == "RUN_ERROR":
            code = event.get("code")
            return Step(error=code if isinstance(code, str) and code else "run_error")
        return _NOTHING


class AiSdk(Dialect):
    """The Vercel AI SDK: ``POST .../ai-sdk`` as ``DefaultChatTransport`` sends it."""

    name = "ai-sdk"

    def endpoint(self, config: BenchConfig) -> str:
        return endpoint_url(config.url, config.agent, "ai-sdk")

    def body(self, config: BenchConfig, turn: Turn, said: Sequence[Any] = ()) -> bytes:
        messages = [
            {
                "id": uuid.uuid4().hex,
                "role": m["role"],
                "parts": [{"type": "text", "text": m["content"]}],
            }
            for m in turn.messages()
        ]
        return orjson.dumps({"id": turn.thread, "messages": messages, "trigger": "submit-message"})

    def step(self, data: str, reader: Reader) -> Step:
        if data == "[DONE]":
            return _NOTHING
        chunk = _json(data)
        if chunk is None:
            return _bad()
        kind = chunk.get("type")
        if kind == "text-delta" or kind == "reasoning-delta":
            delta = chunk.get("delta")
            return Step(text=delta) if isinstance(delta, str) else _bad()
        if kind == "tool-input-start":
            name = chunk.get("toolName")
            return Step(tool=name) if isinstance(name, str) and name else _NOTHING
        if kind == "error":
            return Step(error="stream_error")
        if kind == "finish":
            reason = chunk.get("finishReason")
            return (
                _DONE
                if reason in (None, "stop", "length", "tool-calls")
                else Step(error=f"finish_{reason}")
            )
        return _NOTHING


_A2A_FAILED = frozenset({"failed", "canceled", "rejected", "auth-required"})


#: A2A 1.0 (ProtoJSON) stream result members -> the 0.3 ``kind`` of the same object.
_A2A_V1_KINDS = (("artifactUpdate", "artifact-update"), ("statusUpdate", "status-update"),
                 ("task", "task"), ("message", "message"))  # fmt: skip
#: States that close a 1.0 stream (terminal or interrupted), in 0.3 spelling.
_A2A_CLOSING = frozenset(
    {"completed", "failed", "canceled", "rejected", "input-required", "auth-required"}
)


def _a2a_v03(result: dict[str, Any]) -> dict[str, Any]:
    """A 1.0 stream result in the 0.3 shape (``kind`` tag, lower-case state, ``final``)."""
    for member, kind in _A2A_V1_KINDS:
        body = result.get(member)
        if isinstance(body, dict):
            out = {**body, "kind": kind}
            status = body.get("status")
            if isinstance(status, dict) and isinstance(status.get("state"), str):
                state = status["state"].removeprefix("TASK_STATE_").lower().replace("_", "-")
                out["status"] = {**status, "state": state}
                out["final"] = state in _A2A_CLOSING
            return out
    return result


class A2A(Dialect):
    """A2A JSON-RPC streaming (``POST .../a2a``): 1.0's ``SendStreamingMessage`` or 0.3's."""

    def __init__(self, name: str, *, v1: bool) -> None:
        self.name = name
        self.v1 = v1

    def endpoint(self, config: BenchConfig) -> str:
        return endpoint_url(config.url, config.agent, "a2a")

    def body(self, config: BenchConfig, turn: Turn, said: Sequence[Any] = ()) -> bytes:
        # The server keeps the conversation: a turn names its context and says only the prompt.
        message: dict[str, Any] = {"messageId": uuid.uuid4().hex, "contextId": turn.thread}
        if self.v1:
            message.update(role="ROLE_USER", parts=[{"text": turn.prompt}])
        else:
            message.update(kind="message", role="user")
            message["parts"] = [{"kind": "text", "text": turn.prompt}]
        return orjson.dumps(
            {
                "jsonrpc": "2.0",
                "id": uuid.uuid4().hex,
                "method": "SendStreamingMessage" if self.v1 else "message/stream",
                "params": {"message": message},
            }
        )

    def step(self, data: str, reader: Reader) -> Step:
        envelope = _json(data)
        if envelope is None:
            return _bad()
        if "error" in envelope:
            error = envelope["error"]
            code = error.get("code") if isinstance(error, dict) else None
            return Step(error=f"jsonrpc_{code}" if isinstance(code, int) else "stream_error")
        result = envelope.get("result")
        if not isinstance(result, dict):
            return _bad()
        if self.v1:
            result = _a2a_v03(result)
        kind = result.get("kind")
        if kind == "artifact-update":
            artifact = result.get("artifact") or {}
            parts = artifact.get("parts") if isinstance(artifact, dict) else None
            text = "".join(
                p["text"]
                for p in parts or ()
                if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
            if result.get("lastChunk") and reader.streamed:
                return _NOTHING  # the whole text again, after the chunks
            return Step(text=text)
        state = None
        if kind == "status-update" and result.get("final"):
            state = (result.get("status") or {}).get("state")
        elif kind == "task":
            state = (result.get("status") or {}).get("state")
            if state not in _A2A_FAILED and state != "completed":
                return _NOTHING
        if state is None:
            return _NOTHING
        if state == "completed":
            return _DONE
        return Step(error=f"task_{state}" if isinstance(state, str) else "bad_response")


class Anthropic(Dialect):
    """The Anthropic Messages API (``POST .../v1/messages``)."""

    name = "anthropic"
    headers = (("anthropic-version", "2023-06-01"),)

    def endpoint(self, config: BenchConfig) -> str:
        return endpoint_url(config.url, config.agent, "v1/messages")

    def body(self, config: BenchConfig, turn: Turn, said: Sequence[Any] = ()) -> bytes:
        body: dict[str, Any] = {
            "model": config.model or config.agent or _agent_in(config.url) or "uamp",
            "max_tokens": turn.max_tokens or config.max_tokens or 4096,
            "messages": [*turn.messages(), *said],
            "stream": config.stream,
        }
        if turn.tools:  # Chat Completions' form -> Anthropic's (input_schema)
            body["tools"] = [
                {"name": f["name"], "description": f.get("description", ""),
                 "input_schema": f.get("parameters") or {"type": "object"}}
                for f in (t["function"] for t in turn.tools)
            ]  # fmt: skip
        return orjson.dumps(body)

    def answered(self, turn: Turn, calls: list[dict[str, str]]) -> list[Any]:
        uses = []
        for call in calls:
            try:
                arguments = orjson.loads(call["arguments"] or "{}")
            except orjson.JSONDecodeError:
                arguments = {}
            uses.append({"type": "tool_use", "id": call["id"], "name": call["name"],
                         "input": arguments if isinstance(arguments, dict) else {}})  # fmt: skip
        results = [
            {"type": "tool_result", "tool_use_id": c["id"], "content": turn.tool_result(c["name"])}
            for c in calls
        ]
        return [{"role": "assistant", "content": uses}, {"role": "user", "content": results}]

    def step(self, data: str, reader: Reader) -> Step:
        event = _json(data)
        if event is None:
            return _bad()
        kind = event.get("type")
        if kind == "content_block_start":
            return _anthropic_call(event, reader)
        if kind == "content_block_delta":
            delta = event.get("delta")
            if not isinstance(delta, dict):
                return _bad()
            if delta.get("type") == "input_json_delta":
                call = reader.calls.get(event.get("index"))
                if call is not None and isinstance(delta.get("partial_json"), str):
                    call["arguments"] += delta["partial_json"]
                return _NOTHING
            text = delta.get("text") or delta.get("thinking") or ""
            return Step(text=text) if isinstance(text, str) else _bad()
        if kind == "message_stop":
            return _DONE
        if kind == "error":
            error = event.get("error")
            code = error.get("type") if isinstance(error, dict) else None
            return Step(error=code if isinstance(code, str) and code else "stream_error")
        return _NOTHING

    def whole(self, body: bytes) -> Step:
        try:
            blocks = orjson.loads(body)["content"]
        except (orjson.JSONDecodeError, LookupError, TypeError):
            return _bad()
        text = "".join(
            b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str)
        )
        return Step(text=text, done=True)


def _anthropic_call(event: dict[str, Any], reader: Reader) -> Step:
    """A ``content_block_start``: a ``tool_use`` block is a client tool call (kept by index)."""
    block = event.get("content_block")
    if not isinstance(block, dict) or block.get("type") != "tool_use":
        return _NOTHING
    name, ident = block.get("name"), block.get("id")
    if not isinstance(name, str) or not isinstance(ident, str):
        return _bad()
    reader.calls[event.get("index")] = {"id": ident, "name": name, "arguments": ""}
    return Step(tool=name)


def _agent_in(url: str) -> str | None:
    """``NAME`` in ``.../agents/NAME...``, if the URL names an agent."""
    _, found, rest = url.partition("/agents/")
    return rest.split("/")[0] or None if found else None


#: The HTTP dialects by ``--transport`` name.
DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (
        OpenAI(),
        Responses(),
        AGUI(),
        A2A("a2a", v1=True),
        A2A("a2a-0.3", v1=False),
        Anthropic(),
        AiSdk(),
    )
}
