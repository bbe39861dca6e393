"""UAMP events of one turn -> OpenAI Realtime server events (:class:`ResponseEncoder`).

Realtime nests a response's output: output items (a message, a function
call) hold content parts (text, audio), each opened, streamed and closed in
order; the encoder opens and closes them as the agent's events come (the
nesting is drawn in :mod:`uamp_proto.adapters.realtime`). A text or audio
delta is its hot path. The agent's own tools are not Realtime function
calls: only a client ``tool.call`` becomes a ``function_call`` item. Names
are the session's dialect (GA or beta), ids the session's source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import events as ev
from .. import types as ty
from ..audio import (
    CONVERTED_FORMATS,
    formats_available,
    recode_b64,
)

if TYPE_CHECKING:
    from .realtime_session import RealtimeSession

__all__ = [
    "ResponseEncoder",
]

# --- the response encoder ---------------------------------------------------------------------


class ResponseEncoder:
    """UAMP events of one turn -> Realtime server events (see the module docstring).

    Args:
        session: The session (dialect, ids).
        response_id: The response's id.
        modalities: The response's output modalities.
        conversation: ``"auto"`` (items join the conversation) or ``"none"``.
        metadata: ``response.metadata`` to echo.
    """

    def __init__(
        self,
        session: RealtimeSession,
        response_id: str,
        *,
        modalities: list[str],
        conversation: str = "auto",
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.session = session
        self.response_id = response_id
        self.modalities = modalities
        self.conversation = conversation
        self.metadata = metadata
        #: Finished output items, in order.
        self.output: list[dict[str, Any]] = []
        self.finished = False
        self._item: dict[str, Any] | None = None  # the open message item
        self._part: dict[str, Any] | None = None  # its open content part
        self._audio_chunks: list[str] = []

    def _event(self, ga_name: str, **fields: Any) -> dict[str, Any]:
        return self.session._event(ga_name, response_id=self.response_id, **fields)

    def _response(self, status: str, **extra: Any) -> dict[str, Any]:
        mods_key = "modalities" if self.session.beta else "output_modalities"
        return {
            "id": self.response_id,
            "object": "realtime.response",
            "status": status,
            "status_details": None,
            "output": [dict(i) for i in self.output],
            "conversation_id": None if self.conversation == "none" else self.session.session_id,
            mods_key: list(self.modalities),
            "metadata": self.metadata,
            "usage": None,
            **extra,
        }

    # --- items and parts -------------------------------------------------------------

    def _index(self) -> int:
        return len(self.output)

    def _previous(self) -> str | None:
        # The item a new output item follows in the conversation: this
        # response's last finished item, else the conversation's last item.
        if self.output:
            return str(self.output[-1]["id"])
        return str(self.session.items[-1]["id"]) if self.session.items else None

    def _item_added(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        # A new output item joins the conversation, unless the response is out of band.
        if self.conversation == "none":
            return []
        return [
            {
                "type": self.session.name("conversation.item.added"),
                "event_id": self.session.ids("event"),
                "previous_item_id": self._previous(),
                "item": item,
            }
        ]

    def _open_item(self) -> list[dict[str, Any]]:
        if self._item is not None:
            return []
        item = {
            "id": self.session.ids("item"),
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        self._item = item
        out = [self._event("response.output_item.added", output_index=self._index(), item=item)]
        return out + self._item_added({**item, "content": []})

    def _part_fields(self) -> dict[str, Any]:
        assert self._item is not None
        return {
            "item_id": self._item["id"],
            "output_index": self._index(),
            "content_index": len(self._item["content"]),
        }

    def _open_part(self, kind: str) -> list[dict[str, Any]]:
        out = self._open_item()
        if self._part is not None and self._part["kind"] == kind:
            return out
        out += self._close_part()
        self._part = {"kind": kind, "text": []}
        part = (
            {"type": "text", "text": ""} if kind == "text" else {"type": "audio", "transcript": ""}
        )
        out.append(self._event("response.content_part.added", **self._part_fields(), part=part))
        return out

    def _close_part(self) -> list[dict[str, Any]]:
        part, item = self._part, self._item
        if part is None or item is None:
            return []
        fields = self._part_fields()
        text = "".join(part["text"])
        out: list[dict[str, Any]] = []
        beta = self.session.beta
        if part["kind"] == "text":
            out.append(self._event("response.output_text.done", **fields, text=text))
            done_part = {"type": "text", "text": text}
            item["content"].append({"type": "text" if beta else "output_text", "text": text})
        else:
            out.append(self._event("response.output_audio.done", **fields))
            out.append(
                self._event("response.output_audio_transcript.done", **fields, transcript=text)
            )
            done_part = {"type": "audio", "transcript": text}
            item["content"].append(
                {"type": "audio" if beta else "output_audio", "transcript": text}
            )
        out.append(self._event("response.content_part.done", **fields, part=done_part))
        self._part = None
        return out

    def _close_item(self, status: str = "completed") -> list[dict[str, Any]]:
        out = self._close_part()
        item = self._item
        if item is None:
            return out
        item["status"] = status
        out += self._finish_item(item)
        self._item = None
        return out

    def _finish_item(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        out = [self._event("response.output_item.done", output_index=self._index(), item=item)]
        if self.conversation != "none" and not self.session.beta:
            out.append(
                {
                    "type": "conversation.item.done",
                    "event_id": self.session.ids("event"),
                    "item": item,
                }
            )
        self.output.append(item)
        return out

    def _function_call(self, call: ev.ToolCall) -> list[dict[str, Any]]:
        out = self._close_item()
        item = {
            "id": self.session.ids("item"),
            "object": "realtime.item",
            "type": "function_call",
            "status": "in_progress",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": "",
        }
        index = self._index()
        out.append(self._event("response.output_item.added", output_index=index, item=dict(item)))
        out += self._item_added(dict(item))
        common = {"item_id": item["id"], "output_index": index, "call_id": call.call_id}
        if call.arguments:
            out.append(
                self._event(
                    "response.function_call_arguments.delta", **common, delta=call.arguments
                )
            )
        out.append(
            self._event(
                "response.function_call_arguments.done",
                **common,
                name=call.name,
                arguments=call.arguments,
            )
        )
        item["arguments"] = call.arguments
        item["status"] = "completed"
        out += self._finish_item(item)
        return out

    # --- feeding -----------------------------------------------------------------------

    def feed(self, event: ev.Event) -> list[dict[str, Any]]:
        """The Realtime events for one UAMP event of the turn."""
        if self.finished:
            return []
        if isinstance(event, ev.ResponseCreated):
            return [self.session._event("response.created", response=self._response("in_progress"))]
        if isinstance(event, ev.ResponseDelta):
            delta = event.delta
            if isinstance(delta, ty.DeltaText):
                return self._text(delta.text)
            if isinstance(delta, ty.DeltaAudio):
                return self._audio(delta.audio)
            return []  # the agent's own tools are not Realtime function calls
        if isinstance(event, ev.AudioDelta):
            return self._audio(event.audio)
        if isinstance(event, ev.TranscriptDelta):
            out = self._open_part("audio")
            assert self._part is not None
            self._part["text"].append(event.transcript)
            out.append(
                self._event(
                    "response.output_audio_transcript.delta",
                    **self._part_fields(),
                    delta=event.transcript,
                )
            )
            return out
        if isinstance(event, ev.ToolCall):
            return self._function_call(event)
        if isinstance(event, ev.ResponseDone):
            return self.finish("completed", usage=event.response.usage)
        if isinstance(event, ev.ResponseCancelled):
            return self.finish("cancelled")
        if isinstance(event, ev.ResponseErrorEvent):
            return self.finish("failed", error=event.error)
        return []

    def _text(self, text: str) -> list[dict[str, Any]]:
        if not text:
            return []
        out = self._open_part("text")
        assert self._part is not None
        self._part["text"].append(text)
        out.append(self._event("response.output_text.delta", **self._part_fields(), delta=text))
        return out

    def _audio(self, audio: str) -> list[dict[str, Any]]:
        spoken = self.session.settings.output_format
        if spoken in CONVERTED_FORMATS and spoken in formats_available():
            audio = recode_b64(audio, spoken)  # the agent speaks pcm16
        out = self._open_part("audio")
        out.append(self._event("response.output_audio.delta", **self._part_fields(), delta=audio))
        return out

    def finish(
        self,
        status: str,
        *,
        usage: ty.UsageStats | None = None,
        error: ty.ErrorInfo | None = None,
    ) -> list[dict[str, Any]]:
        """Close what is open and send ``response.done`` (once).

        Args:
            status: ``completed``, ``cancelled``, ``failed`` or ``incomplete``.
            usage: The response's usage.
            error: Why a failed response failed.
        """
        if self.finished:
            return []
        self.finished = True
        out = self._close_item("completed" if status == "completed" else "incomplete")
        response = self._response(status)
        if status == "cancelled":
            response["status_details"] = {"type": "cancelled", "reason": "client_cancelled"}
        elif status == "failed" and error is not None:
            response["status_details"] = {
                "type": "failed",
                "error": {"type": "server_error", "code": error.code, "message": error.message},
            }
        elif status == "incomplete":
            response["status_details"] = {"type": "incomplete", "reason": "max_output_tokens"}
        if usage is not None:
            inp, outp = usage.input_tokens or 0, usage.output_tokens or 0
            response["usage"] = {
                "total_tokens": usage.total_tokens
                if usage.total_tokens is not None
                else inp + outp,
                "input_tokens": inp,
                "output_tokens": outp,
                "input_token_details": {
                    "cached_tokens": usage.cached_tokens or 0,
                    "text_tokens": inp,
                    "audio_tokens": 0,
                },
                "output_token_details": {"text_tokens": outp, "audio_tokens": 0},
            }
        out.append(self.session._event("response.done", response=response))
        if self.conversation != "none":
            self.session.add_output(self.output)
        return out
