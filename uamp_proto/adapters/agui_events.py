"""AG-UI event streams read back: the chunk forms expanded, the history they build (AG-UI 1.0).

Theory of operation
-------------------
uamp always *sends* the explicit triads (``TEXT_MESSAGE_START``/``CONTENT``/
``END``, ``TOOL_CALL_START``/``ARGS``/``END``). What comes *back* -- a run a
client saved and re-encoded, a stream another AG-UI agent produced -- may use
the convenience forms ``TEXT_MESSAGE_CHUNK`` and ``TOOL_CALL_CHUNK``.

:class:`ChunkExpander` turns them into the triads as the specification's
client stream transformer does (``@ag-ui/client``'s ``transformChunks``):

* the first chunk of a message must name ``messageId`` and opens it with
  ``TEXT_MESSAGE_START`` (``role`` defaults to ``assistant``); the first
  chunk of a tool call must name ``toolCallId`` and ``toolCallName`` and
  opens it with ``TOOL_CALL_START`` (with its ``parentMessageId``);
* a chunk with a ``delta`` is a ``TEXT_MESSAGE_CONTENT`` / ``TOOL_CALL_ARGS``
  of what is open (a chunk without an id continues it);
* what a chunk opened is closed (``*_END``) when a chunk names another id,
  when a chunk of the other kind comes, when any other event comes, and at
  the end of the stream (:meth:`ChunkExpander.close`).

Its table, by what is open and what arrives:

==========================  ==================  =================================
open                        event               out
==========================  ==================  =================================
nothing                     text chunk, id      START, CONTENT if delta
nothing                     text chunk, no id   error (the first chunk names it)
text ``m``                  text chunk, ``m``   CONTENT if delta
text ``m``                  text chunk, none    CONTENT if delta
text ``m``                  text chunk, ``n``   END ``m``, START ``n``, CONTENT
text ``m``                  tool chunk          END ``m``, then as from nothing
nothing / text / tool       other event         END of what is open, the event
==========================  ==================  =================================

(tool chunks mirror the text rows.) :func:`apply_events` then builds the
conversation the stream describes, as ``@ag-ui/client``'s
``defaultApplyEvents`` builds a client's history: ``RUN_STARTED.input``
messages not yet known are added; a text message is created by its start
and grows by its content; a tool call joins the assistant message its
``parentMessageId`` names (else a new assistant message); a
``TOOL_CALL_RESULT`` becomes a ``tool`` message right after the message
holding its call; ``MESSAGES_SNAPSHOT`` replaces what it names, drops what
it does not (reasoning and activity messages stay unless it lists messages
of that role) and adds the rest. The result is a list of AG-UI ``Message`` objects: what that client
sends as the next ``RunAgentInput.messages`` (:func:`~uamp_proto.adapters.agui.parse_run_input`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from ..errors import UampError

__all__ = ["ChunkError", "ChunkExpander", "apply_events", "expand_chunks"]

TEXT_CHUNK: Final = "TEXT_MESSAGE_CHUNK"
TOOL_CHUNK: Final = "TOOL_CALL_CHUNK"


class ChunkError(UampError):
    """A chunk that cannot be expanded: the first of a message or tool call names no id."""


def _str(event: Mapping[str, Any], key: str) -> str | None:
    value = event.get(key)
    return value if isinstance(value, str) and value else None


class ChunkExpander:
    """Expands ``TEXT_MESSAGE_CHUNK`` / ``TOOL_CALL_CHUNK`` into triads (module docstring)."""

    def __init__(self) -> None:
        #: What a chunk opened and no event closed yet: ``("text"|"tool", id)``.
        self.open: tuple[str, str] | None = None

    def feed(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The explicit events ``event`` stands for (itself when it is no chunk).

        Raises:
            ChunkError: The first chunk of a message or tool call names no id
                (or a tool call's first chunk no ``toolCallName``).
        """
        kind = event.get("type")
        if kind == TEXT_CHUNK:
            return self._chunk("text", event)
        if kind == TOOL_CHUNK:
            return self._chunk("tool", event)
        return [*self.close(), dict(event)]

    def close(self) -> list[dict[str, Any]]:
        """The ``*_END`` of what chunks left open (at the end of the stream)."""
        if self.open is None:
            return []
        kind, ident = self.open
        self.open = None
        if kind == "text":
            return [{"type": "TEXT_MESSAGE_END", "messageId": ident}]
        return [{"type": "TOOL_CALL_END", "toolCallId": ident}]

    def _chunk(self, kind: str, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        key = "messageId" if kind == "text" else "toolCallId"
        ident = _str(event, key)
        out: list[dict[str, Any]] = []
        if self.open is not None and (self.open[0] != kind or (ident and ident != self.open[1])):
            out += self.close()
        if self.open is None:
            if ident is None:
                raise ChunkError(f"the first {event.get('type')} of a stream names no {key}")
            out.append(self._start(kind, ident, event))
            self.open = (kind, ident)
        delta = event.get("delta")
        if isinstance(delta, str) and delta:
            current = self.open[1]
            if kind == "text":
                out.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": current, "delta": delta})
            else:
                out.append({"type": "TOOL_CALL_ARGS", "toolCallId": current, "delta": delta})
        return out

    @staticmethod
    def _start(kind: str, ident: str, event: Mapping[str, Any]) -> dict[str, Any]:
        if kind == "text":
            return {
                "type": "TEXT_MESSAGE_START",
                "messageId": ident,
                "role": _str(event, "role") or "assistant",
            }
        name = _str(event, "toolCallName")
        if name is None:
            raise ChunkError(f"the first TOOL_CALL_CHUNK of call {ident!r} names no toolCallName")
        start = {"type": "TOOL_CALL_START", "toolCallId": ident, "toolCallName": name}
        parent = _str(event, "parentMessageId")
        if parent is not None:
            start["parentMessageId"] = parent
        return start


def expand_chunks(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``events`` with every chunk expanded, what chunks opened closed at the end.

    Raises:
        ChunkError: As :meth:`ChunkExpander.feed`.
    """
    expander = ChunkExpander()
    out: list[dict[str, Any]] = []
    for event in events:
        out += expander.feed(event)
    return out + expander.close()


def _holder(messages: list[dict[str, Any]], call_id: str) -> dict[str, Any] | None:
    """The message holding tool call ``call_id``."""
    for message in messages:
        if any(c.get("id") == call_id for c in message.get("toolCalls") or ()):
            return message
    return None


def _assistant_for(
    messages: list[dict[str, Any]], parent: str | None, call_id: str
) -> dict[str, Any]:
    """The assistant message a new tool call joins (created when there is none)."""
    message: dict[str, Any]
    if parent is not None:
        found = next((m for m in messages if m.get("id") == parent), None)
        if found is not None and found.get("role") == "assistant":
            return found
        message = {"id": call_id if found is not None else parent, "role": "assistant"}
    else:
        message = {"id": call_id, "role": "assistant"}
    message["toolCalls"] = []
    messages.append(message)
    return message


def apply_events(
    events: Iterable[Mapping[str, Any]], messages: Iterable[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """The conversation ``messages`` become after ``events`` (chunks expanded first).

    Events that name a message or call nobody started are skipped, as the
    reference client skips them.

    Raises:
        ChunkError: As :meth:`ChunkExpander.feed`.
    """
    history = [dict(m) for m in messages]
    for event in expand_chunks(events):
        kind = event.get("type")
        if kind == "RUN_STARTED":
            given = event.get("input")
            known = {m.get("id") for m in history}
            for message in (given.get("messages") or []) if isinstance(given, dict) else []:
                if isinstance(message, dict) and message.get("id") not in known:
                    history.append(dict(message))
        elif kind == "TEXT_MESSAGE_START":
            if not any(m.get("id") == event.get("messageId") for m in history):
                role = event.get("role") or "assistant"
                history.append({"id": event.get("messageId"), "role": role, "content": ""})
        elif kind == "TEXT_MESSAGE_CONTENT":
            found = next((m for m in history if m.get("id") == event.get("messageId")), None)
            if found is not None:
                found["content"] = (found.get("content") or "") + str(event.get("delta", ""))
        elif kind == "TOOL_CALL_START":
            call_id = str(event.get("toolCallId"))
            if _holder(history, call_id) is None:
                owner = _assistant_for(history, _str(event, "parentMessageId"), call_id)
                owner.setdefault("toolCalls", []).append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": event.get("toolCallName"), "arguments": ""},
                    }
                )
        elif kind == "TOOL_CALL_ARGS":
            call_id = str(event.get("toolCallId"))
            holder = _holder(history, call_id)
            if holder is not None:
                call = next(c for c in holder["toolCalls"] if c.get("id") == call_id)
                call["function"]["arguments"] += str(event.get("delta", ""))
        elif kind == "TOOL_CALL_RESULT":
            result = {
                "id": event.get("messageId"),
                "role": event.get("role") or "tool",
                "toolCallId": event.get("toolCallId"),
                "content": event.get("content"),
            }
            holder = _holder(history, str(event.get("toolCallId")))
            at = len(history) if holder is None else history.index(holder) + 1
            while holder is not None and at < len(history) and history[at].get("role") == "tool":
                at += 1
            history.insert(at, result)
        elif kind == "MESSAGES_SNAPSHOT":
            snapshot = [dict(m) for m in event.get("messages") or [] if isinstance(m, dict)]
            by_id = {m.get("id"): m for m in snapshot}
            # Reasoning and activity messages are UI state: kept unless it lists its own.
            listed = {m.get("role") for m in snapshot}
            history = [
                by_id.get(m.get("id"), m)
                for m in history
                if m.get("id") in by_id
                or (m.get("role") in ("reasoning", "activity") and m.get("role") not in listed)
            ]
            kept = {m.get("id") for m in history}
            history += [m for m in snapshot if m.get("id") not in kept]
    return history
