"""One OpenAI Realtime connection, server side: :class:`RealtimeSession`.

The session keeps what Realtime keeps on the server: the session's settings
(``session.update``), the conversation's items, the input audio buffer and
the voice call it is (see "Calls" in :mod:`uamp_proto.adapters.realtime`),
with ``server_vad`` turn detection when asked. :meth:`RealtimeSession.handle`
takes one client event and returns the replies owed and an action
(:mod:`~uamp_proto.adapters.realtime_actions`); bad input is answered with
an ``error`` event, never raised. :meth:`RealtimeSession.turn_request`
makes the conversation the agent's request (items -> UAMP messages).
"""

from __future__ import annotations

import base64
from typing import Any

import attrs
import orjson

from .. import jsonbounds
from .. import types as ty
from ..audio import (
    CONVERTED_FORMATS,
    TurnDetector,
    TurnSettings,
    decode_b64,
    formats_available,
    to_pcm16,
    vad_available,
)
from ..errors import ProtocolError
from ..ids import IdSource
from ..principal import ANONYMOUS, Principal
from ..responder import TurnRequest
from ..response import AssistantGather
from ..voice import Call, CallAnswer, CallEnded, CallOffer, CallState
from ._tools import ToolFormError, parse_tool_call
from .realtime_actions import (
    CancelResponse,
    CreateResponse,
    EndCall,
    Handled,
    PlaceCall,
    ResponseOptions,
    SubmitPayment,
)
from .realtime_fields import (
    _DATA_URL,
    _UAMP_TO_GA_AUDIO,
    RealtimeError,
    _audio_format,
    _b64_bytes,
    _max_tokens,
    _modalities,
    _obj,
    _opt_str,
    _req_str,
    _tool_choice,
    _tool_error,
    _tools,
    error_event,
)

__all__ = [
    "DEFAULT_MAX_AUDIO_BUFFER",
    "RealtimeSession",
]

#: Largest input audio buffer kept before a commit (OpenAI caps appends at 15 MiB).
DEFAULT_MAX_AUDIO_BUFFER = 15 * 1024 * 1024

# GA name -> beta name of the server events that were renamed.
_BETA_NAMES = {
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "conversation.item.added": "conversation.item.created",
}


# --- the session ------------------------------------------------------------------------------


@attrs.define(kw_only=True)
class _Settings:
    instructions: str | None = None
    tools: list[ty.ToolDefinition] = attrs.field(factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    modalities: list[str] = attrs.field(factory=lambda: ["text"])
    voice: str = "alloy"
    input_format: str = "pcm16"
    output_format: str = "pcm16"
    max_output_tokens: int | None = None
    #: ``server_vad`` settings as reported (``None``: the client commits turns).
    turn_detection: dict[str, Any] | None = None


class RealtimeSession:
    """One Realtime connection, server side (see the module docstring).

    Args:
        session_id: The session's id (``sess_...``).
        model: The ``model`` of the connection URL, echoed in the session.
        beta: Speak the beta dialect (``OpenAI-Beta: realtime=v1``).
        ids: Makes event, item and call ids.
        modalities: Default output modalities.
        max_audio_buffer: Largest uncommitted input audio, in bytes.
        voices: The voices the agent declares (``capabilities.audio.voices``):
            another is refused at ``session.update`` (UAMP 8.1: a setting is
            honoured or refused), and the default is the first of them when
            ``alloy`` is not one. ``None``: any voice is taken.
        expires_at: When the session ends, in seconds since the epoch (the
            connection's credential expires): the session object's
            ``expires_at``. ``None``: it does not.
    """

    def __init__(
        self,
        *,
        session_id: str,
        model: str | None,
        beta: bool,
        ids: IdSource,
        modalities: list[str] | None = None,
        max_audio_buffer: int = DEFAULT_MAX_AUDIO_BUFFER,
        voices: list[str] | None = None,
        expires_at: int | None = None,
    ) -> None:
        self.session_id = session_id
        self.model = model
        self.beta = beta
        self.ids = ids
        self.voices = voices
        self.expires_at = expires_at
        self.settings = _Settings(modalities=list(modalities or ["text"]))
        if voices and self.settings.voice not in voices:
            self.settings.voice = voices[0]
        self.items: list[dict[str, Any]] = []
        self.max_audio_buffer = max_audio_buffer
        self._audio = bytearray()
        #: The connection's voice call (see "Calls" in the module docstring).
        self.call = Call()
        #: ``server_vad``'s detector, and the id of the item the turn it hears becomes.
        self._detector: TurnDetector | None = None
        self._vad_item: str | None = None

    # --- naming ---------------------------------------------------------------------

    def name(self, ga_name: str) -> str:
        """The wire name of a server event in this session's dialect."""
        return _BETA_NAMES.get(ga_name, ga_name) if self.beta else ga_name

    def _event(self, ga_name: str, **fields: Any) -> dict[str, Any]:
        return {"type": self.name(ga_name), "event_id": self.ids("event"), **fields}

    def item_events(
        self, item: dict[str, Any], previous_item_id: str | None
    ) -> list[dict[str, Any]]:
        """``conversation.item.added`` (+ ``.done``; beta: ``.created``) for a new item."""
        out = [self._event("conversation.item.added", previous_item_id=previous_item_id, item=item)]
        if not self.beta:
            out.append(
                self._event("conversation.item.done", previous_item_id=previous_item_id, item=item)
            )
        return out

    # --- session object -------------------------------------------------------------

    def session_object(self) -> dict[str, Any]:
        """The session resource of ``session.created`` / ``session.updated``."""
        s = self.settings
        tools = [
            {
                "type": "function",
                "name": t.function.name,
                "description": t.function.description or "",
                "parameters": t.function.parameters or {"type": "object", "properties": {}},
            }
            for t in s.tools
        ]
        choice: Any = s.tool_choice
        if isinstance(choice, dict):
            choice = {"type": "function", "name": choice["function"]["name"]}
        if self.beta:
            return {
                "id": self.session_id,
                "object": "realtime.session",
                **self._expiry(),
                "model": self.model,
                "modalities": ["text", "audio"] if "audio" in s.modalities else ["text"],
                "instructions": s.instructions or "",
                "voice": s.voice,
                "input_audio_format": s.input_format,
                "output_audio_format": s.output_format,
                "input_audio_transcription": None,
                "turn_detection": s.turn_detection,
                "tools": tools,
                "tool_choice": choice,
                "max_response_output_tokens": s.max_output_tokens or "inf",
            }
        return {
            "type": "realtime",
            "object": "realtime.session",
            "id": self.session_id,
            **self._expiry(),
            "model": self.model,
            "output_modalities": list(s.modalities),
            "instructions": s.instructions or "",
            "tools": tools,
            "tool_choice": choice,
            "max_output_tokens": s.max_output_tokens or "inf",
            "audio": {
                "input": {
                    "format": {"type": _UAMP_TO_GA_AUDIO[s.input_format], "rate": 24000},
                    "transcription": None,
                    "turn_detection": s.turn_detection,
                },
                "output": {
                    "format": {"type": _UAMP_TO_GA_AUDIO[s.output_format], "rate": 24000},
                    "voice": s.voice,
                },
            },
        }

    def _expiry(self) -> dict[str, int]:
        """``expires_at`` of the session object, when the session ends at a known time."""
        return {} if self.expires_at is None else {"expires_at": self.expires_at}

    def created_event(self, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        """``session.created``: the first event of the connection, sent unprompted.

        Args:
            capabilities: The agent's UAMP Capabilities object (JSON form).
                UAMP section 9.2 makes ``session.created`` the Realtime
                transport's discovery point, so it rides along as an extra
                top-level ``capabilities`` member, which Realtime clients
                ignore.
        """
        event = self._event("session.created", session=self.session_object())
        if capabilities is not None:
            event["capabilities"] = capabilities
        return event

    # --- client events --------------------------------------------------------------

    def handle_message(self, message: str | bytes) -> Handled:
        """Process one client message as received: a bounded JSON parse, then :meth:`handle`."""
        try:
            jsonbounds.check(message)
            obj = orjson.loads(message)
        except jsonbounds.TooManyValues as exc:
            text, code = f"The message is not parsed: {exc}", "json_too_complex"
        except orjson.JSONDecodeError as exc:
            text, code = f"The message is not valid JSON: {exc}", "invalid_json"
        else:
            return self.handle(obj)
        return Handled(replies=[error_event(self.ids("event"), text, code=code)])

    def handle(self, event: object) -> Handled:
        """Process one client event (a parsed JSON value); never raises for bad input."""
        client_event_id: str | None = None
        try:
            obj = _obj(event, "event")
            raw_id = obj.get("event_id")
            client_event_id = raw_id if isinstance(raw_id, str) else None
            kind = obj.get("type")
            if not isinstance(kind, str):
                raise RealtimeError(
                    "Missing required parameter: 'type'.",
                    code="missing_required_parameter",
                    param="type",
                )
            handler = self._HANDLERS.get(kind)
            if handler is None:
                raise RealtimeError(
                    f"Invalid value: {kind!r}. This is not a client event type this "
                    "server supports.",
                    code="invalid_value",
                    param="type",
                )
            handled: Handled = handler(self, obj, client_event_id)
            return handled
        except RealtimeError as exc:
            return Handled(replies=[exc.event(self.ids("event"), client_event_id)])

    def _session_update(self, obj: dict[str, Any], cid: str | None) -> Handled:
        sess = _obj(obj.get("session", {}), "session")
        kind = sess.get("type")
        if kind not in (None, "realtime"):
            raise RealtimeError(
                f"session.type {kind!r} is not supported here; use 'realtime'.",
                code="unsupported_value",
                param="session.type",
            )
        s = attrs.evolve(self.settings)
        if "instructions" in sess:
            s.instructions = _opt_str(sess, "instructions", "session.instructions")
        if "tools" in sess:
            s.tools = _tools(sess["tools"], "session.tools")
        if "tool_choice" in sess:
            s.tool_choice = _tool_choice(sess["tool_choice"], "session.tool_choice")
        for key in ("output_modalities", "modalities"):
            if key in sess:
                mods = _modalities(sess[key], f"session.{key}")
                # Beta lists ["text", "audio"] for audio; GA lists one modality.
                s.modalities = ["audio"] if "audio" in mods and not self.beta else mods
        if "voice" in sess:
            s.voice = _req_str(sess, "voice", "session.voice")
        if "turn_detection" in sess:
            raw_turns = sess["turn_detection"]
            s.turn_detection = self._turn_detection(raw_turns, "session.turn_detection")
        if "input_audio_format" in sess:
            s.input_format = _audio_format(sess["input_audio_format"], "session.input_audio_format")
        if "output_audio_format" in sess:
            s.output_format = _audio_format(
                sess["output_audio_format"], "session.output_audio_format"
            )
        audio = sess.get("audio")
        if audio is not None:
            audio = _obj(audio, "session.audio")
            inp = _obj(audio.get("input", {}), "session.audio.input")
            out = _obj(audio.get("output", {}), "session.audio.output")
            if "format" in inp:
                s.input_format = _audio_format(inp["format"], "session.audio.input.format")
            if "format" in out:
                s.output_format = _audio_format(out["format"], "session.audio.output.format")
            if "voice" in out:
                s.voice = _req_str(out, "voice", "session.audio.output.voice")
            if "turn_detection" in inp:
                s.turn_detection = self._turn_detection(
                    inp["turn_detection"], "session.audio.input.turn_detection"
                )
        for key in ("max_output_tokens", "max_response_output_tokens"):
            if key in sess:
                s.max_output_tokens = _max_tokens(sess[key], f"session.{key}")
        if self.voices is not None and s.voice not in self.voices:
            param = "session.audio.output.voice" if "voice" not in sess else "session.voice"
            raise RealtimeError(
                f"voice {s.voice!r} is not one of this agent's: {', '.join(self.voices)}.",
                code="unsupported_value",
                param=param,
            )
        if s.turn_detection != self.settings.turn_detection:
            turns = s.turn_detection
            self._detector = None if turns is None else TurnDetector(TurnSettings.of(turns))
            self._vad_item = None
        self.settings = s
        return Handled(replies=[self._event("session.updated", session=self.session_object())])

    def _turn_detection(self, raw: object, param: str) -> dict[str, Any] | None:
        """``server_vad`` settings, completed with their defaults; ``None`` turns it off."""
        if raw is None:
            return None
        obj = _obj(raw, param)
        if obj.get("type") != "server_vad":
            raise RealtimeError(
                f"{param}.type {obj.get('type')!r} is not supported here: only server_vad "
                "(or null, and commit the buffer yourself).",
                code="unsupported_value",
                param=f"{param}.type",
            )
        if not vad_available():
            raise RealtimeError(
                "server_vad needs a voice activity detector: install uamp's voice extra.",
                code="unsupported_value",
                param=param,
            )
        try:
            settings = TurnSettings.of(obj)
        except ValueError as exc:
            raise RealtimeError(str(exc), code="invalid_value", param=param) from None
        create = obj.get("create_response", True)
        if not isinstance(create, bool):
            raise RealtimeError(
                f"{param}.create_response must be a boolean.", param=f"{param}.create_response"
            )
        return {
            "type": "server_vad",
            "threshold": settings.threshold,
            "prefix_padding_ms": settings.prefix_padding_ms,
            "silence_duration_ms": settings.silence_duration_ms,
            "create_response": create,
        }

    # --- input audio ------------------------------------------------------------------

    def _audio_append(self, obj: dict[str, Any], cid: str | None) -> Handled:
        data = _b64_bytes(_req_str(obj, "audio", "audio"), "audio")
        if self.call.state is CallState.IDLE:
            call_id = self.ids("call")
            self.call.apply("voice.invite", None, call_id=call_id)
            return Handled(
                replies=[], action=PlaceCall(call_id=call_id, audio=data, client_event_id=cid)
            )
        replies = self._buffer(data)
        detector = self._detector
        if detector is None:
            return Handled(replies=replies)
        return self._detect(detector, data, replies)

    def _detect(
        self, detector: TurnDetector, data: bytes, replies: list[dict[str, Any]]
    ) -> Handled:
        """``server_vad``: speech_started / speech_stopped, and the turn committed at its end."""
        try:
            pcm = to_pcm16(data, self.settings.input_format)
        except ValueError:
            return Handled(replies=replies)
        action: CreateResponse | None = None
        for turn in detector.feed(pcm):
            if turn.kind == "speech_started":
                self._vad_item = self.ids("item")
                replies.append(
                    self._event(
                        "input_audio_buffer.speech_started",
                        audio_start_ms=turn.at_ms,
                        item_id=self._vad_item,
                    )
                )
                continue
            item_id = self._vad_item or self.ids("item")
            self._vad_item = None
            replies.append(
                self._event(
                    "input_audio_buffer.speech_stopped", audio_end_ms=turn.at_ms, item_id=item_id
                )
            )
            if self._audio:
                replies.extend(self._commit(item_id))
                turns = self.settings.turn_detection or {}
                if turns.get("create_response", True):
                    action = CreateResponse(options=ResponseOptions(), client_event_id=None)
        return Handled(replies=replies, action=action)

    def _buffer(self, data: bytes) -> list[dict[str, Any]]:
        try:
            self.call.check_audio()
        except ProtocolError as exc:
            raise RealtimeError(exc.message, code=exc.code, param="audio") from None
        if len(self._audio) + len(data) > self.max_audio_buffer:
            raise RealtimeError(
                f"The input audio buffer would exceed {self.max_audio_buffer} bytes; "
                "commit or clear it first.",
                code="input_audio_buffer_full",
                param="audio",
            )
        self._audio += data
        return []

    def call_offer(self, placed: PlaceCall, principal: Principal) -> CallOffer:
        """What the agent is asked about the call :class:`PlaceCall` places."""
        return CallOffer(
            call_id=placed.call_id,
            session_id=self.session_id,
            transport="realtime",
            principal=principal,
        )

    def call_answered(
        self, placed: PlaceCall, answer: CallAnswer, now: float
    ) -> list[dict[str, Any]]:
        """The agent's answer to :class:`PlaceCall` at ``now``: the replies owed.

        Accepted: ``voice.accept`` (with the agent's ``sdp``, if any), then
        the audio is buffered. Declined: the audio's ``error`` event
        (``call_not_active``, with the agent's reason).
        """
        cid = placed.client_event_id
        if self.call.state is not CallState.RINGING or self.call.call_id != placed.call_id:
            return []  # the call was ended meanwhile
        if not answer.accept:
            self.call.apply("voice.decline", now, call_id=placed.call_id, reason=answer.reason)
            why = f" ({answer.reason})" if answer.reason else ""
            refused = RealtimeError(
                f"Audio refused: the call was declined{why}. Send text with "
                "conversation.item.create instead.",
                code="call_not_active",
                param="audio",
            )
            return [refused.event(self.ids("event"), cid)]
        self.call.apply("voice.accept", now, call_id=placed.call_id)
        fields: dict[str, Any] = {"call_id": placed.call_id}
        if answer.sdp is not None:
            fields["sdp"] = answer.sdp
        accepted = self._event("voice.accept", **fields)
        try:
            return [accepted, *self._buffer(placed.audio)]
        except RealtimeError as exc:
            return [accepted, exc.event(self.ids("event"), cid)]

    def _voice_end(self, obj: dict[str, Any], cid: str | None) -> Handled:
        if self.call.state is CallState.IDLE:
            raise RealtimeError(
                "voice.end not allowed: no call is active.", code="invalid_event", param="type"
            )
        call_id = _opt_str(obj, "call_id", "call_id")
        if call_id is not None and call_id != self.call.call_id:
            raise RealtimeError(
                f"Call {call_id!r} is not this session's call {self.call.call_id!r}.",
                code="unknown_call",
                param="call_id",
            )
        reason = _opt_str(obj, "reason", "reason")
        return Handled(replies=[], action=EndCall(reason=reason, client_event_id=cid))

    def end_call(
        self, now: float, reason: str = "ended"
    ) -> tuple[list[dict[str, Any]], CallEnded | None]:
        """End the call (if one rings or is active) at ``now``.

        Returns:
            The ``voice.end`` reply (with ``call_id``, ``duration_ms`` and
            ``reason``) and what to tell the agent; nothing when no call
            was placed. Audio appended and not committed is dropped with it.
        """
        call = self.call
        if call.state is CallState.IDLE or call.call_id is None:
            return [], None
        call_id = call.call_id
        duration = call.apply("voice.end", now, call_id=call_id)
        self._audio.clear()
        ended = CallEnded(
            call_id=call_id, session_id=self.session_id, duration_ms=duration, reason=reason
        )
        reply = self._event("voice.end", call_id=call_id, duration_ms=duration, reason=reason)
        return [reply], ended

    def _audio_commit(self, obj: dict[str, Any], cid: str | None) -> Handled:
        if not self._audio:
            raise RealtimeError(
                "Error committing input audio buffer: the buffer is empty.",
                code="input_audio_buffer_commit_empty",
            )
        return Handled(replies=self._commit(self.ids("item")))

    def _commit(self, item_id: str) -> list[dict[str, Any]]:
        """The buffered audio as the user item ``item_id``: ``committed`` and the item's events."""
        audio = base64.b64encode(bytes(self._audio)).decode("ascii")
        self._audio.clear()
        item = {
            "id": item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_audio", "audio": audio, "transcript": None}],
        }
        previous = self.items[-1]["id"] if self.items else None
        self.items.append(item)
        committed = self._event(
            "input_audio_buffer.committed", previous_item_id=previous, item_id=item["id"]
        )
        return [committed, *self.item_events(item, previous)]

    def _audio_clear(self, obj: dict[str, Any], cid: str | None) -> Handled:
        self._audio.clear()
        return Handled(replies=[self._event("input_audio_buffer.cleared")])

    @property
    def buffered_audio(self) -> int:
        """Bytes of input audio appended and not yet committed."""
        return len(self._audio)

    # --- conversation -----------------------------------------------------------------

    def _find(self, item_id: str, param: str) -> int:
        for i, item in enumerate(self.items):
            if item.get("id") == item_id:
                return i
        raise RealtimeError(
            f"Item with item_id not found: {item_id}", code="item_not_found", param=param
        )

    def _content(self, role: str, raw: object, param: str) -> list[dict[str, Any]]:
        if not isinstance(raw, list):
            raise RealtimeError(f"'{param}' must be an array.", code="invalid_type", param=param)
        allowed = {
            "user": {"input_text", "input_audio", "input_image"},
            "system": {"input_text"},
            "assistant": {"output_text", "text", "output_audio", "audio"},
        }[role]
        out: list[dict[str, Any]] = []
        for i, part in enumerate(raw):
            where = f"{param}[{i}]"
            p = _obj(part, where)
            kind = p.get("type")
            if kind not in allowed:
                raise RealtimeError(
                    f"'{where}.type' {kind!r} is not valid in a {role} message; "
                    f"use {', '.join(sorted(allowed))}.",
                    param=f"{where}.type",
                )
            if kind in ("input_text", "output_text", "text"):
                _req_str(p, "text", f"{where}.text")
            elif kind == "input_audio":
                if p.get("audio") is not None:
                    _b64_bytes(_req_str(p, "audio", f"{where}.audio"), f"{where}.audio")
                elif p.get("transcript") is None:
                    raise RealtimeError(
                        f"'{where}' needs 'audio' or 'transcript'.",
                        code="missing_required_parameter",
                        param=f"{where}.audio",
                    )
            elif kind == "input_image":
                url = _req_str(p, "image_url", f"{where}.image_url")
                if not _DATA_URL.match(url) and not url.startswith(("http://", "https://")):
                    raise RealtimeError(
                        f"'{where}.image_url' must be a data: URL or an http(s) URL.",
                        param=f"{where}.image_url",
                    )
            out.append(dict(p))
        return out

    def _validate_item(self, raw: object) -> dict[str, Any]:
        item = dict(_obj(raw, "item"))
        kind = item.get("type")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system"):
                raise RealtimeError(
                    "'item.role' must be 'user', 'assistant' or 'system'.", param="item.role"
                )
            item["content"] = self._content(role, item.get("content"), "item.content")
        elif kind == "function_call":
            item.setdefault("arguments", "")
            try:
                parse_tool_call(item, "item", flat=True)
            except ToolFormError as exc:
                raise _tool_error(exc) from None
        elif kind == "function_call_output":
            call_id = _req_str(item, "call_id", "item.call_id")
            _req_str(item, "output", "item.output")
            if not any(
                i.get("type") == "function_call" and i.get("call_id") == call_id for i in self.items
            ):
                raise RealtimeError(
                    f"No function call with call_id {call_id!r} in the conversation.",
                    param="item.call_id",
                )
        else:
            raise RealtimeError(
                f"'item.type' {kind!r} is not supported; use 'message', 'function_call' "
                "or 'function_call_output'.",
                param="item.type",
            )
        item_id = _opt_str(item, "id", "item.id")
        if item_id is None:
            item["id"] = self.ids("item")
        elif any(i.get("id") == item_id for i in self.items):
            raise RealtimeError(
                f"Item with id {item_id!r} already exists.",
                code="duplicate_item_id",
                param="item.id",
            )
        item["object"] = "realtime.item"
        item["status"] = "completed"
        return item

    def _item_create(self, obj: dict[str, Any], cid: str | None) -> Handled:
        item = self._validate_item(obj.get("item"))
        prev = _opt_str(obj, "previous_item_id", "previous_item_id")
        if prev is None:
            index = len(self.items)
        elif prev == "root":
            index = 0
        else:
            index = self._find(prev, "previous_item_id") + 1
        previous = self.items[index - 1]["id"] if index > 0 else None
        self.items.insert(index, item)
        return Handled(replies=self.item_events(item, previous))

    def _item_delete(self, obj: dict[str, Any], cid: str | None) -> Handled:
        item_id = _req_str(obj, "item_id", "item_id")
        del self.items[self._find(item_id, "item_id")]
        return Handled(replies=[self._event("conversation.item.deleted", item_id=item_id)])

    def _item_retrieve(self, obj: dict[str, Any], cid: str | None) -> Handled:
        item_id = _req_str(obj, "item_id", "item_id")
        item = self.items[self._find(item_id, "item_id")]
        return Handled(replies=[self._event("conversation.item.retrieved", item=item)])

    def _item_truncate(self, obj: dict[str, Any], cid: str | None) -> Handled:
        item_id = _req_str(obj, "item_id", "item_id")
        item = self.items[self._find(item_id, "item_id")]
        index = obj.get("content_index")
        end_ms = obj.get("audio_end_ms")
        if item.get("role") != "assistant":
            raise RealtimeError("Only assistant message items can be truncated.", param="item_id")
        content = item.get("content") or []
        if not isinstance(index, int) or not 0 <= index < len(content):
            raise RealtimeError("'content_index' is out of range.", param="content_index")
        if not isinstance(end_ms, int) or isinstance(end_ms, bool) or end_ms < 0:
            raise RealtimeError(
                "'audio_end_ms' must be a non-negative integer.", param="audio_end_ms"
            )
        part = content[index]
        if part.get("type") not in ("output_audio", "audio"):
            raise RealtimeError("Only audio content can be truncated.", param="content_index")
        # The client heard only this much: drop the transcript the user never heard.
        part["transcript"] = ""
        return Handled(
            replies=[
                self._event(
                    "conversation.item.truncated",
                    item_id=item_id,
                    content_index=index,
                    audio_end_ms=end_ms,
                )
            ]
        )

    # --- responses ------------------------------------------------------------------------

    def _response_create(self, obj: dict[str, Any], cid: str | None) -> Handled:
        resp = _obj(obj.get("response") or {}, "response")
        opts: dict[str, Any] = {}
        if "instructions" in resp:
            opts["instructions"] = _opt_str(resp, "instructions", "response.instructions")
        if "tools" in resp:
            opts["tools"] = _tools(resp["tools"], "response.tools")
        if "tool_choice" in resp:
            opts["tool_choice"] = _tool_choice(resp["tool_choice"], "response.tool_choice")
        for key in ("output_modalities", "modalities"):
            if key in resp:
                opts["modalities"] = _modalities(resp[key], f"response.{key}")
        if "conversation" in resp:
            conv = resp["conversation"]
            if conv not in ("auto", "none"):
                raise RealtimeError(
                    "'response.conversation' must be 'auto' or 'none'.",
                    param="response.conversation",
                )
            opts["conversation"] = conv
        if "input" in resp:
            raw = resp["input"]
            if not isinstance(raw, list):
                raise RealtimeError("'response.input' must be an array.", param="response.input")
            opts["input"] = [self._input_item(x, f"response.input[{i}]") for i, x in enumerate(raw)]
        if "metadata" in resp:
            opts["metadata"] = _obj(resp["metadata"], "response.metadata")
        for key in ("max_output_tokens", "max_response_output_tokens"):
            if key in resp:
                opts["max_output_tokens"] = _max_tokens(resp[key], f"response.{key}")
        return Handled(
            replies=[], action=CreateResponse(options=ResponseOptions(**opts), client_event_id=cid)
        )

    def _input_item(self, raw: object, param: str) -> dict[str, Any]:
        obj = _obj(raw, param)
        if obj.get("type") == "item_reference":
            ref = _req_str(obj, "id", f"{param}.id")
            return self.items[self._find(ref, f"{param}.id")]
        saved = list(self.items)
        try:
            return self._validate_item(obj)
        finally:
            self.items = saved

    def _response_cancel(self, obj: dict[str, Any], cid: str | None) -> Handled:
        rid = _opt_str(obj, "response_id", "response_id")
        return Handled(replies=[], action=CancelResponse(response_id=rid, client_event_id=cid))

    def _payment_submit(self, obj: dict[str, Any], cid: str | None) -> Handled:
        payment = _obj(obj.get("payment"), "payment")
        return Handled(
            replies=[],
            action=SubmitPayment(
                token=_opt_str(payment, "token", "payment.token"),
                scheme=_opt_str(payment, "scheme", "payment.scheme"),
                client_event_id=cid,
            ),
        )

    _HANDLERS: dict[str, Any] = {
        "session.update": _session_update,
        "input_audio_buffer.append": _audio_append,
        "input_audio_buffer.commit": _audio_commit,
        "input_audio_buffer.clear": _audio_clear,
        "conversation.item.create": _item_create,
        "conversation.item.delete": _item_delete,
        "conversation.item.retrieve": _item_retrieve,
        "conversation.item.truncate": _item_truncate,
        "response.create": _response_create,
        "response.cancel": _response_cancel,
        "payment.submit": _payment_submit,
        "voice.end": _voice_end,
    }

    # --- turn requests ----------------------------------------------------------------------

    def messages(self, items: list[dict[str, Any]] | None = None) -> list[ty.Message]:
        """UAMP messages for conversation items (default: the whole conversation).

        Consecutive assistant text and function calls form one assistant
        message; each function call output is a ``role="tool"`` message.
        """
        out: list[ty.Message] = []
        gather = AssistantGather(out)
        for item in self.items if items is None else items:
            kind = item.get("type")
            if kind == "function_call":
                gather.calls.append(
                    ty.ToolInvocation(
                        id=item.get("call_id") or item["id"],
                        name=item["name"],
                        arguments=item.get("arguments") or "",
                    )
                )
                continue
            if kind == "message" and item.get("role") == "assistant":
                if gather.calls:
                    gather.flush()
                for part in item.get("content") or []:
                    text = part.get("text") or part.get("transcript") or ""
                    gather.text.append(text)
                continue
            gather.flush()
            if kind == "function_call_output":
                out.append(
                    ty.Message(role="tool", content=item["output"], tool_call_id=item["call_id"])
                )
            elif kind == "message":
                out.append(self._message(item))
        gather.flush()
        return out

    def _heard(self, audio: str) -> ty.AudioContent:
        """Input audio for the agent: pcm16, converted from G.711 where this install can."""
        fmt = self.settings.input_format
        if fmt in CONVERTED_FORMATS and fmt in formats_available():
            pcm = to_pcm16(decode_b64(audio), fmt)
            return ty.AudioContent(audio=base64.b64encode(pcm).decode("ascii"), format="pcm16")
        return ty.AudioContent(audio=audio, format=fmt)

    def _message(self, item: dict[str, Any]) -> ty.Message:
        role = item["role"]
        items: list[ty.ContentItem] = []
        for part in item.get("content") or []:
            kind = part.get("type")
            if kind in ("input_text", "text", "output_text"):
                items.append(ty.TextContent(text=part["text"]))
            elif kind == "input_audio":
                if part.get("audio"):
                    items.append(self._heard(part["audio"]))
                elif part.get("transcript"):
                    items.append(ty.TextContent(text=part["transcript"]))
            elif kind == "input_image":
                url = part["image_url"]
                m = _DATA_URL.match(url)
                if m is not None:
                    mime = m.group("mime") or ""
                    fmt = mime.split("/", 1)[1] if "/" in mime else None
                    items.append(
                        ty.ImageContent(
                            image=m.group("data"), format=fmt, detail=part.get("detail")
                        )
                    )
                else:
                    items.append(
                        ty.ImageContent(image=ty.MediaURL(url=url), detail=part.get("detail"))
                    )
        text = "".join(i.text for i in items if isinstance(i, ty.TextContent))
        if all(isinstance(i, ty.TextContent) for i in items):
            return ty.Message(role=role, content=text)
        return ty.Message(role=role, content=text or None, content_items=items)

    def turn_request(
        self,
        options: ResponseOptions,
        *,
        agent: str,
        response_id: str,
        payment_token: str | None = None,
        principal: Principal = ANONYMOUS,
    ) -> TurnRequest:
        """The agent's request for a ``response.create`` with ``options`` (for ``principal``)."""
        s = self.settings
        messages = self.messages(options.input)
        metadata: dict[str, Any] = {"transport": "realtime"}
        if self.model:
            metadata["model"] = self.model
        max_tokens = options.max_output_tokens or s.max_output_tokens
        if max_tokens is not None:
            metadata["max_tokens"] = max_tokens
        if options.metadata:
            metadata["response_metadata"] = options.metadata
        metadata["voice"] = {"voice_id": s.voice}  # the agent's speech output (UAMP 8.1)
        modalities = options.modalities or s.modalities
        return TurnRequest(
            agent=agent,
            session_id=self.session_id,
            response_id=response_id,
            messages=messages,
            instructions=options.instructions
            if options.instructions is not None
            else (s.instructions or None),
            tools=options.tools if options.tools is not None else list(s.tools),
            tool_choice=options.tool_choice if options.tool_choice is not None else s.tool_choice,
            modalities=["text", "audio"] if "audio" in modalities else ["text"],
            payment_token=payment_token,
            metadata=metadata,
            principal=principal,
        )

    def add_output(self, items: list[dict[str, Any]]) -> None:
        """Append a finished response's output items to the conversation."""
        self.items.extend(items)
