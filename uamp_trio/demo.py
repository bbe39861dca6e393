"""``DemoAgent``: a small deterministic agent every transport can serve.

It needs no model and no network, and the same conversation always gets the
same reply (ids included), on every transport. Its rules:

* **Reply.** To a user message it answers ``You said: <text>`` (plus
  ``(with N attachments)`` when the message carried images, audio or
  files), or ``Hello! Send me a message.`` when there is no text.
* **Streaming.** The reply is emitted word by word, one
  ``response.delta`` (text) per word with its following space.
* **Usage.** One ``usage.delta``: input tokens = whitespace-separated words
  of every message's text, output tokens = words of the reply.
  ``max_tokens`` (from ``request.metadata``) cuts the reply to that many
  words.
* **Tools.** Only tools the client declared are ever called, never more than
  one per turn:

  - ``tool_choice="none"`` (or no tools): never;
  - ``tool_choice="required"``: the tool the text mentions by name, else
    the first declared tool;
  - ``tool_choice={"type": "function", "function": {"name": X}}``: ``X``;
  - ``"auto"`` or unset: a tool only if the user text mentions its name
    (case-insensitive; ``get_weather`` also matches ``get weather``).

  The call's arguments fill every *required string* property of the tool's
  JSON schema with the user text (other required types get ``0``,
  ``false``, ``[]`` or ``{}``); a tool with no required properties gets
  ``{"query": <text>}``. The call id is ``call_`` plus a hash of the
  conversation, so it is deterministic too. The agent then returns and
  waits for the result.
* **Tool results.** When the conversation ends with ``role="tool"``
  messages it answers ``Tool <name> returned: <result>`` (one sentence per
  result, joined by a space).
* **Voice.** It takes calls (docs/voice.md): its capabilities declare
  realtime audio (``audio.supports_realtime``); its modalities stay text,
  so transports that pick an output modality from them keep text. When audio output is asked for
  (``request.modalities`` holds ``"audio"``) and the user message carries
  audio, it echoes that audio back in ``audio.delta`` chunks (of at most
  :data:`AUDIO_CHUNK` base64 characters), then ``audio.done``; audio with
  nothing in it is answered with :func:`tone`, a short 440 Hz beep.

:class:`CallTaker` gives any served agent the same voice rule: ``uamp
serve`` hosts the UAP demo agent wrapped in it, so the default agent takes
calls while its text answers stay the UAP agent's own.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from typing import Final

import attrs

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, Responder, TurnRequest, placeholder_arguments

__all__ = ["AUDIO_CHUNK", "CallTaker", "DemoAgent", "tone"]

_EMPTY_REPLY = "Hello! Send me a message."
#: Base64 characters per echoed ``audio.delta`` (a multiple of 4: whole bytes).
AUDIO_CHUNK: Final = 8192
#: The beep's sample rate (pcm16, mono).
TONE_RATE: Final = 24000


def tone(seconds: float = 0.2, hz: float = 440.0) -> str:
    """A sine beep as base64 pcm16 mono at :data:`TONE_RATE`."""
    frames = int(TONE_RATE * seconds)
    samples = (int(12000 * math.sin(2 * math.pi * hz * n / TONE_RATE)) for n in range(frames))
    return base64.b64encode(struct.pack(f"<{frames}h", *samples)).decode()


async def echo_audio(message: ty.Message, emit: Emit) -> bool:
    """Echo ``message``'s audio (silence: a beep) as ``audio.delta``; whether it had any."""
    clips = [
        i.audio
        for i in message.content_items or ()
        if isinstance(i, ty.AudioContent) and isinstance(i.audio, str)
    ]
    if not clips:
        return False
    if not any(clip.strip("A=") for clip in clips):  # silence or nothing: a beep
        clips = [tone()]
    for clip in clips:
        for start in range(0, len(clip), AUDIO_CHUNK):
            await emit(ev.AudioDelta(audio=clip[start : start + AUDIO_CHUNK]))
    await emit(ev.AudioDone())
    return True


def _words(text: str) -> int:
    return len(text.split())


class DemoAgent:
    """The built-in deterministic demo agent (see the module docstring)."""

    def __init__(self, name: str = "demo") -> None:
        self._name = name

    @property
    def name(self) -> str:
        """The name it is registered under (``demo`` by default)."""
        return self._name

    def capabilities(self) -> ty.Capabilities:
        """Text and audio, streaming, client tools (one per turn), voice calls."""
        return ty.Capabilities(
            id=self._name,
            provider="uamp-demo",
            modalities=["text"],
            audio=ty.AudioCapabilities(
                input_formats=["pcm16"], output_formats=["pcm16"], supports_realtime=True
            ),
            supports_streaming=True,
            supports_thinking=False,
            supports_caching=False,
            tools=ty.ToolCapabilities(
                supports_tools=True,
                supports_parallel_tools=False,
                supports_streaming_tools=True,
            ),
        )

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """Answer the conversation's last message following the module's rules."""
        messages = request.messages
        input_tokens = sum(_words(m.text) for m in messages)
        if messages and messages[-1].role == "tool":
            reply = self._tool_reply(messages)
        else:
            user = next((m for m in reversed(messages) if m.role == "user"), None)
            text = user.text.strip() if user is not None else ""
            tool = self._choose_tool(request, text)
            if tool is not None:
                await emit(
                    ev.ToolCall(
                        call_id=self._call_id(messages, tool.function.name),
                        name=tool.function.name,
                        arguments=placeholder_arguments(tool, text),
                    )
                )
                await emit(
                    ev.UsageDelta(delta=ty.UsageStats(input_tokens=input_tokens, output_tokens=0))
                )
                return
            if "audio" in request.modalities and user is not None:
                await echo_audio(user, emit)
            reply = f"You said: {text}" if text else _EMPTY_REPLY
            attachments = self._attachments(user)
            if attachments:
                reply += f" (with {attachments} attachment{'s' if attachments > 1 else ''})"
        words = reply.split(" ")
        limit = request.metadata.get("max_tokens")
        if isinstance(limit, int) and limit > 0:
            words = words[:limit]
        for i, word in enumerate(words):
            piece = word if i == len(words) - 1 else word + " "
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=piece)))
        await emit(
            ev.UsageDelta(
                delta=ty.UsageStats(
                    input_tokens=input_tokens, output_tokens=_words(" ".join(words))
                )
            )
        )

    # --- rules -------------------------------------------------------------

    @staticmethod
    def _attachments(message: ty.Message | None) -> int:
        if message is None or not message.content_items:
            return 0
        media = (ty.ImageContent, ty.AudioContent, ty.VideoContent, ty.FileContent)
        return sum(isinstance(i, media) for i in message.content_items)

    @staticmethod
    def _choose_tool(request: TurnRequest, text: str) -> ty.ToolDefinition | None:
        tools = request.tools
        choice = request.tool_choice
        if not tools or choice == "none":
            return None
        if isinstance(choice, dict):
            wanted = choice.get("function", {}).get("name")
            return next((t for t in tools if t.function.name == wanted), None)
        lowered = text.lower()
        mentioned = next(
            (
                t
                for t in tools
                if t.function.name.lower() in lowered
                or t.function.name.lower().replace("_", " ") in lowered
            ),
            None,
        )
        if choice == "required":
            return mentioned or tools[0]
        return mentioned  # "auto" or unset

    @staticmethod
    def _call_id(messages: list[ty.Message], tool_name: str) -> str:
        digest = hashlib.sha256()
        for m in messages:
            digest.update(f"{m.role}\0{m.text}\0".encode())
        digest.update(tool_name.encode())
        return "call_" + digest.hexdigest()[:24]

    @staticmethod
    def _tool_reply(messages: list[ty.Message]) -> str:
        results: list[ty.Message] = []
        for m in reversed(messages):
            if m.role != "tool":
                break
            results.append(m)
        results.reverse()
        names: dict[str, str] = {}
        for m in messages:
            for call in m.tool_calls or []:
                names[call.id] = call.name
        sentences = [
            f"Tool {names.get(m.tool_call_id or '', 'tool')} returned: {m.text}" for m in results
        ]
        return " ".join(sentences)


class CallTaker:
    """``inner`` that also takes calls (docs/voice.md): audio asked for is echoed.

    Its capabilities are ``inner``'s with realtime pcm16 audio declared
    (:func:`uamp_proto.voice.takes_calls`). A turn that asks for audio and
    whose user message carries audio with no text is answered by
    :func:`echo_audio` alone; every other turn is ``inner``'s.
    """

    def __init__(self, inner: Responder) -> None:
        self.inner = inner
        #: ``inner``'s name.
        self.name: str = inner.name

    @property
    def checkpoints(self) -> bool:
        """``inner``'s checkpoint switch (``uamp serve --store`` sets it)."""
        return bool(getattr(self.inner, "checkpoints", False))

    @checkpoints.setter
    def checkpoints(self, value: bool) -> None:
        if hasattr(self.inner, "checkpoints"):
            self.inner.checkpoints = value

    def capabilities(self) -> ty.Capabilities:
        """``inner``'s, with realtime audio: it takes calls."""
        audio = ty.AudioCapabilities(
            input_formats=["pcm16"], output_formats=["pcm16"], supports_realtime=True
        )
        return attrs.evolve(self.inner.capabilities(), audio=audio)

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """Echo a call's audio; leave everything else to ``inner``."""
        last = request.messages[-1] if request.messages else None
        if (
            "audio" in request.modalities
            and last is not None
            and last.role == "user"
            and not last.text.strip()
            and await echo_audio(last, emit)
        ):
            return
        await self.inner.respond(request, emit)
