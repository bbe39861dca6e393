"""UAMP events -> the OpenAI Responses API's Response object and event stream.

Theory of operation
-------------------
A response's output is a list of *items*, built from the slots the turn's
:class:`~uamp_proto.response.ResponseTracker` keeps: a text slot becomes a
``message`` item with one ``output_text`` part, a thinking slot a
``reasoning`` item whose summary is the thinking text, and a client tool call
(a ``tool_call`` with no result in the output: the agent asked the client)
a ``function_call`` item. The agent's own tool calls and results, audio and
media make no item, but they end the item before them, as they end a slot.

:class:`StreamEncoder` follows the same rule event by event, so the items it
streams have the indices -- and the ids, made from the response id and the
index, never random -- that :func:`output_items` gives the finished output.
Because the encoder is a pure function of the UAMP events, the stream of a
stored response can be rendered again from its event log at any time with
the same ``sequence_number`` s: that is how ``GET /responses/{id}?stream=true``
replays a background response, from 0 or after ``starting_after``
(``after``: the events up to it are counted, not written).

The stream's order: ``response.created`` and ``response.in_progress``; per
item ``response.output_item.added``, its part or summary part, its deltas,
their ``.done``, ``response.output_item.done``; last ``response.completed``,
``response.incomplete`` (``max_output_tokens`` reached, or the process
running it was lost: reason ``null``), or ``response.failed`` (after an
``error`` event; also for a cancelled response, with ``status:
"cancelled"``, since the API has no cancelled event). Text deltas and their
done events carry ``logprobs: []``, output text ``annotations: []``: the
``openai`` SDK's strict validation requires them.

A text delta, nearly every event of a stream, is rendered from a template:
the bytes before the text are made once per item, the text is JSON-encoded
and the sequence number appended.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import orjson

from .. import events as ev
from .. import types as ty
from ..response import ResponseTracker
from ..sse import encode_json

__all__ = [
    "StreamEncoder",
    "error_code",
    "input_items_page",
    "item_id",
    "output_items",
    "response_object",
    "stored_response",
    "usage_object",
]

#: ``Response.error.code`` is one of a closed set in the SDK: ours map here.
_ERROR_CODES: Final = {
    "rate_limited": "rate_limit_exceeded",
    "rate_limit_exceeded": "rate_limit_exceeded",
    "invalid_request": "invalid_prompt",
}
#: The UAMP error code of a response whose process was lost (uamp_proto.resume).
_INTERRUPTED: Final = "interrupted"
_SEQ: Final = b',"sequence_number":'
_dumps = orjson.dumps


def error_code(code: str) -> str:
    """A UAMP error code as one of the codes a Response's ``error`` may carry."""
    return _ERROR_CODES.get(code, "server_error")


def item_id(response_id: str, index: int, prefix: str) -> str:
    """The id of output item ``index`` of ``response_id`` (``msg``, ``rs`` or ``fc``)."""
    return f"{prefix}_{response_id.removeprefix('resp_')}_{index}"


def usage_object(usage: ty.UsageStats | None) -> dict[str, Any]:
    """The Responses ``usage`` object, details objects included."""
    given = usage or ty.UsageStats()
    inp, out = given.input_tokens or 0, given.output_tokens or 0
    total = given.total_tokens if given.total_tokens is not None else inp + out
    return {
        "input_tokens": inp,
        "input_tokens_details": {
            "cached_tokens": given.cached_tokens or 0,
            "cache_write_tokens": 0,
        },
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": total,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message(rid: str, index: int, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [_text_part(text)]
    return {
        "id": item_id(rid, index, "msg"),
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def _reasoning(rid: str, index: int, text: str | None) -> dict[str, Any]:
    summary = [] if not text else [{"type": "summary_text", "text": text}]
    return {"id": item_id(rid, index, "rs"), "type": "reasoning", "summary": summary}


def _function_call(rid: str, index: int, call: ty.ToolInvocation, status: str) -> dict[str, Any]:
    return {
        "id": item_id(rid, index, "fc"),
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
        "status": status,
    }


def output_items(
    response_id: str, output: Sequence[ty.ContentItem], *, status: str = "completed"
) -> list[dict[str, Any]]:
    """The Response ``output`` for a turn's output content items (see the module docstring)."""
    answered = {i.tool_result.call_id for i in output if isinstance(i, ty.ToolResultContent)}
    items: list[dict[str, Any]] = []
    for part in output:
        n = len(items)
        if isinstance(part, ty.TextContent):
            items.append(_message(response_id, n, part.text, status))
        elif isinstance(part, ty.ThinkingContent):
            items.append(_reasoning(response_id, n, None if part.redacted else part.thinking))
        elif isinstance(part, ty.ToolCallContent) and part.tool_call.id not in answered:
            items.append(_function_call(response_id, n, part.tool_call, "completed"))
    return items


def response_object(
    response_id: str,
    echo: dict[str, Any],
    *,
    status: str,
    output: list[dict[str, Any]],
    usage: ty.UsageStats | None = None,
    error: ty.ErrorInfo | None = None,
    incomplete: str | None = None,
) -> dict[str, Any]:
    """The Response object.

    Args:
        response_id: Its id.
        echo: The request fields it repeats (:attr:`ResponsesRequest.echo`).
        status: ``queued``, ``in_progress``, ``completed``, ``incomplete``,
            ``failed`` or ``cancelled``.
        output: Its items (:func:`output_items`).
        usage: Usage, for a response that ended.
        error: Why it failed.
        incomplete: ``incomplete_details.reason`` (``None`` for a lost process).
    """
    ended = status not in ("queued", "in_progress")
    obj: dict[str, Any] = {"id": response_id, "object": "response", **echo}
    obj["status"] = status
    obj["error"] = (
        {"code": error_code(error.code), "message": error.message} if error is not None else None
    )
    obj["incomplete_details"] = {"reason": incomplete} if status == "incomplete" else None
    obj["output"] = output
    obj["usage"] = usage_object(usage) if ended else None
    return obj


def _over_budget(echo: dict[str, Any], usage: ty.UsageStats | None) -> bool:
    budget = echo.get("max_output_tokens")
    used = usage.output_tokens if usage is not None else None
    return budget is not None and used is not None and used >= budget


class StreamEncoder:
    """Renders one response's UAMP events as Responses SSE frames (see the module docstring).

    Args:
        response_id: The response's id.
        echo: The request fields the Response object repeats.
        after: Count, but do not write, the events up to this
            ``sequence_number`` (``starting_after``); ``-1`` writes all.
    """

    def __init__(self, response_id: str, echo: dict[str, Any], *, after: int = -1) -> None:
        self.response_id = response_id
        self.echo = echo
        self.after = after
        #: The next event's ``sequence_number``.
        self.seq = 0
        #: Set once a terminal event was rendered.
        self.finished = False
        #: The finished items so far.
        self.items: list[dict[str, Any]] = []
        self._last = ""  # the kind of the tracker's last slot
        self._open: dict[str, Any] | None = None  # the item being streamed
        self._parts: list[str] = []  # its text so far
        self._fragments: set[str] = set()  # tool calls streamed as fragments
        self._text_head = b""

    # --- frames ---------------------------------------------------------------

    def _frame(self, kind: str, body: dict[str, Any]) -> bytes:
        seq = self.seq
        self.seq = seq + 1
        if seq <= self.after:
            return b""
        body["type"] = kind
        body["sequence_number"] = seq
        return encode_json(orjson.dumps(body), event=kind)

    def _response(self, status: str, **kw: Any) -> dict[str, Any]:
        return response_object(self.response_id, self.echo, status=status, output=[], **kw)

    def opening(self) -> bytes:
        """``response.created`` and ``response.in_progress``."""
        first = "queued" if self.echo.get("background") else "in_progress"
        return self._frame("response.created", {"response": self._response(first)}) + self._frame(
            "response.in_progress", {"response": self._response("in_progress")}
        )

    # --- items ----------------------------------------------------------------

    def _close(self, status: str = "completed") -> bytes:
        item = self._open
        if item is None:
            return b""
        self._open = None
        index = len(self.items)
        text = "".join(self._parts)
        where = {"item_id": item["id"], "output_index": index}
        out = b""
        if item["type"] == "message":
            part = _text_part(text)
            out = self._frame(
                "response.output_text.done",
                {**where, "content_index": 0, "text": text, "logprobs": []},
            ) + self._frame(
                "response.content_part.done", {**where, "content_index": 0, "part": part}
            )
            item = _message(self.response_id, index, text, status)
        elif item["summary_open"]:
            part = {"type": "summary_text", "text": text}
            out = self._frame(
                "response.reasoning_summary_text.done", {**where, "summary_index": 0, "text": text}
            ) + self._frame(
                "response.reasoning_summary_part.done", {**where, "summary_index": 0, "part": part}
            )
            item = _reasoning(self.response_id, index, text)
        else:
            item = _reasoning(self.response_id, index, None)
        self.items.append(item)
        return out + self._frame("response.output_item.done", {"output_index": index, "item": item})

    def _open_message(self) -> bytes:
        out = self._close()
        index = len(self.items)
        item = _message(self.response_id, index, None, "in_progress")
        self._open, self._parts = item, []
        where = {"item_id": item["id"], "output_index": index}
        head = {
            "type": "response.output_text.delta",
            **where,
            "content_index": 0,
            "logprobs": [],
        }
        body = orjson.dumps(head)[:-1]  # without the closing brace
        self._text_head = b"event: response.output_text.delta\ndata: " + body + b',"delta":'
        return (
            out
            + self._frame("response.output_item.added", {"output_index": index, "item": item})
            + self._frame(
                "response.content_part.added", {**where, "content_index": 0, "part": _text_part("")}
            )
        )

    def text(self, text: str) -> bytes:
        """The frames of one text delta."""
        if text and self._last == "text":
            # The usual event: one frame from the item's template.
            self._parts.append(text)
            seq = self.seq
            self.seq = seq + 1
            if seq <= self.after:
                return b""
            return b"".join((self._text_head, _dumps(text), _SEQ, b"%d}\n\n" % seq))
        out = b""
        if self._last != "text":
            self._last = "text"
            out = self._open_message()
        return out + self.text(text) if text else out

    def _thinking(self, event: ev.Thinking) -> bytes:
        if event.is_delta and self._last == "thinking":
            if self._open is None or not self._open["summary_open"] or not event.content:
                return b""
            self._parts.append(event.content)
            return self._summary_delta(event.content)
        self._last = "thinking"
        out = self._close()
        index = len(self.items)
        item = _reasoning(self.response_id, index, None)
        self._open, self._parts = {**item, "summary_open": not event.redacted}, []
        out += self._frame("response.output_item.added", {"output_index": index, "item": item})
        if event.redacted:
            return out
        out += self._frame(
            "response.reasoning_summary_part.added",
            {
                "item_id": item["id"],
                "output_index": index,
                "summary_index": 0,
                "part": {"type": "summary_text", "text": ""},
            },
        )
        if event.content:
            self._parts.append(event.content)
            out += self._summary_delta(event.content)
        return out

    def _summary_delta(self, text: str) -> bytes:
        assert self._open is not None
        body = {
            "item_id": self._open["id"],
            "output_index": len(self.items),
            "summary_index": 0,
            "delta": text,
        }
        return self._frame("response.reasoning_summary_text.delta", body)

    def _client_call(self, event: ev.ToolCall) -> bytes:
        if event.call_id not in self._fragments:
            self._last = "tool_call"
        out = self._close()
        index = len(self.items)
        call = ty.ToolInvocation(id=event.call_id, name=event.name, arguments=event.arguments)
        item = _function_call(self.response_id, index, call, "in_progress")
        where = {"item_id": item["id"], "output_index": index}
        out += self._frame(
            "response.output_item.added", {"output_index": index, "item": {**item, "arguments": ""}}
        )
        if event.arguments:
            out += self._frame(
                "response.function_call_arguments.delta", {**where, "delta": event.arguments}
            )
        out += self._frame(
            "response.function_call_arguments.done",
            {**where, "name": event.name, "arguments": event.arguments},
        )
        done = {**item, "status": "completed"}
        self.items.append(done)
        return out + self._frame("response.output_item.done", {"output_index": index, "item": done})

    def _boundary(self, kind: str, key: str | None = None) -> bytes:
        """A slot that makes no item (own tools, audio) ends the open item."""
        if kind == "tool_call":
            assert key is not None
            if key in self._fragments:
                return b""
            self._fragments.add(key)
        elif kind == "audio" and self._last == "audio":
            return b""
        self._last = kind
        return self._close()

    # --- events ---------------------------------------------------------------

    def sse(self, event: ev.Event | ev.UnknownEvent) -> bytes:
        """The frames for one UAMP event of the response (``b""`` for none)."""
        kind = type(event)
        if kind is ev.ResponseDelta:
            delta = event.delta  # type: ignore[union-attr]
            dkind = type(delta)
            if dkind is ty.DeltaText:
                return self.text(delta.text)
            if dkind is ty.DeltaToolCall:
                return self._boundary("tool_call", delta.tool_call.id)
            if dkind is ty.DeltaToolResult:
                return self._boundary("tool_result")
            if dkind is ty.DeltaAudio:
                return self._boundary("audio")
            return b""
        if kind is ev.Thinking:
            return self._thinking(event)  # type: ignore[arg-type]
        if kind is ev.ToolCall:
            return self._client_call(event)  # type: ignore[arg-type]
        if kind is ev.AudioDelta:
            return self._boundary("audio")
        if kind is ev.ResponseCreated:
            return self.opening()
        if kind is ev.ResponseDone:
            return self._completed(event)  # type: ignore[arg-type]
        if kind is ev.ResponseCancelled:
            out = self._close("incomplete")
            self.finished = True
            body = {"response": self._response("cancelled") | {"output": list(self.items)}}
            return out + self._frame("response.failed", body)
        if kind is ev.ResponseErrorEvent:
            return self._failed(event.error)  # type: ignore[union-attr]
        return b""

    def _completed(self, event: ev.ResponseDone) -> bytes:
        usage = event.response.usage
        over = _over_budget(self.echo, usage)
        status = "incomplete" if over else "completed"
        out = self._close(status)
        self.finished = True
        items = output_items(self.response_id, event.response.output, status=status)
        response = response_object(
            self.response_id,
            self.echo,
            status=status,
            output=items,
            usage=usage,
            incomplete="max_output_tokens" if over else None,
        )
        kind = "response.incomplete" if over else "response.completed"
        return out + self._frame(kind, {"response": response})

    def _failed(self, error: ty.ErrorInfo) -> bytes:
        out = self._close("incomplete")
        self.finished = True
        items = list(self.items)
        if error.code == _INTERRUPTED:
            response = self._response("incomplete") | {"output": items}
            return out + self._frame("response.incomplete", {"response": response})
        response = self._response("failed", error=error) | {"output": items}
        return (
            out
            + self._frame("error", {"code": error.code, "message": error.message, "param": None})
            + self._frame("response.failed", {"response": response})
        )


def stored_response(
    response_id: str, echo: dict[str, Any], events: Sequence[ev.Event | ev.UnknownEvent]
) -> dict[str, Any]:
    """The Response object of a stored response, from the UAMP events its log holds.

    No ``response.created`` yet: ``queued``; no terminal event yet:
    ``in_progress`` with the output so far; else as the terminal event says.
    """
    tracker = ResponseTracker(response_id)
    started = False
    for event in events:
        kind = type(event)
        if kind is ev.ResponseCreated:
            started = True
        elif kind is ev.ResponseDone:
            done: ev.ResponseDone = event  # type: ignore[assignment]
            usage = done.response.usage
            over = _over_budget(echo, usage)
            status = "incomplete" if over else "completed"
            items = output_items(response_id, done.response.output, status=status)
            return response_object(
                response_id,
                echo,
                status=status,
                output=items,
                usage=usage,
                incomplete="max_output_tokens" if over else None,
            )
        elif kind is ev.ResponseCancelled:
            items = output_items(response_id, tracker.output, status="incomplete")
            return response_object(
                response_id, echo, status="cancelled", output=items, usage=tracker.usage
            )
        elif kind is ev.ResponseErrorEvent:
            error: ty.ErrorInfo = event.error  # type: ignore[union-attr]
            items = output_items(response_id, tracker.output, status="incomplete")
            if error.code == _INTERRUPTED:
                return response_object(
                    response_id, echo, status="incomplete", output=items, usage=tracker.usage
                )
            return response_object(
                response_id, echo, status="failed", output=items, usage=tracker.usage, error=error
            )
        if isinstance(event, ev.Event):
            tracker.apply(event)
    status = "in_progress" if started else "queued"
    items = output_items(response_id, tracker.output, status="in_progress")
    return response_object(response_id, echo, status=status, output=items)


def input_items_page(items: list[dict[str, Any]], query: dict[str, str]) -> dict[str, Any]:
    """``GET .../responses/{id}/input_items``: a page of a stored response's input items.

    ``query``: ``after`` (an item id), ``limit`` (1-100, 20 by default),
    ``order`` (``desc``, the default, or ``asc``), as OpenAI's API takes them.

    Raises:
        ValueError: A parameter out of range (the message names it; a 400).
    """
    raw = query.get("limit", "20")
    try:
        limit = int(raw)
    except ValueError:
        raise ValueError("'limit' must be an integer.") from None
    if not 1 <= limit <= 100:
        raise ValueError("'limit' must be from 1 to 100.")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise ValueError("'order' must be 'asc' or 'desc'.")
    listed = list(items)
    if order == "desc":
        listed.reverse()
    after = query.get("after")
    if after is not None:
        ids = [item.get("id") for item in listed]
        listed = listed[ids.index(after) + 1 :] if after in ids else []
    page = listed[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(listed) > limit,
    }
