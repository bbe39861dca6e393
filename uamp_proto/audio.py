"""Voice settings a server honours (UAMP 8.1, 8.2): audio formats and server-side turn detection.

Theory of operation
-------------------
A session's ``input_audio_format`` / ``output_audio_format``,
``turn_detection`` and ``voice`` are either honoured or refused, never echoed
as if they were (:func:`refusal` says which and why, naming the field).

*Formats.* ``pcm16`` (16-bit little-endian mono at the session's rate) is
what agents get and give. ``g711_ulaw`` and ``g711_alaw`` are converted to
and from it sample for sample (:func:`to_pcm16`, :func:`from_pcm16`) with
``audioop``: the standard library's up to Python 3.12, the maintained
``audioop-lts`` port from 3.13 on (the ``voice`` extra installs it where it
is needed). The spec's other formats (``mp3``, ``opus``, ``wav``...) are
containers or codecs this server does not decode: refused.

*Turn detection.* ``{"type": "server_vad", "threshold", "silence_duration_ms",
"prefix_padding_ms"}`` runs :class:`TurnDetector` over the caller's audio:
Google WebRTC's voice activity detector (``webrtcvad-wheels``: binary wheels,
no model to download) on 30 ms frames, ``threshold`` (0..1) choosing its
aggressiveness (0..3), ``silence_duration_ms`` of non-speech ending a turn,
``prefix_padding_ms`` taken off the reported start. Other types
(``semantic_vad``) are refused. Without the ``voice`` extra, ``server_vad``
and the G.711 formats are refused with a message that names it.

Pure computation, no I/O, no clock: positions are milliseconds of audio fed.
"""

from __future__ import annotations

import base64
import importlib
import warnings
from collections.abc import Mapping
from typing import Any, Final

import attrs

from .types import AudioContent, Message

__all__ = [
    "CONVERTED_FORMATS",
    "DEFAULT_RATE",
    "VAD_RATES",
    "TurnDetector",
    "TurnEvent",
    "TurnSettings",
    "decode_b64",
    "formats_available",
    "from_pcm16",
    "pcm16_messages",
    "recode_b64",
    "refusal",
    "to_pcm16",
    "vad_available",
]

#: The formats converted to and from ``pcm16`` (with ``audioop``).
CONVERTED_FORMATS: Final = frozenset({"g711_ulaw", "g711_alaw"})
#: The session rate when nothing says otherwise (Realtime's pcm16 rate).
DEFAULT_RATE: Final = 24_000
#: The rates WebRTC's detector takes; others are resampled to 16 kHz first.
VAD_RATES: Final = frozenset({8_000, 16_000, 32_000, 48_000})
_FRAME_MS: Final = 30
#: Frames of speech in a row that start a turn (60 ms: a click is no speech).
_START_FRAMES: Final = 2

_VOICE_EXTRA = "install uamp's voice extra: pip install 'uamp[voice]'"


def _audioop() -> Any:
    with warnings.catch_warnings():  # the stdlib module warns of its removal in 3.13
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return importlib.import_module("audioop")
        except ModuleNotFoundError:
            return None


def _webrtcvad() -> Any:
    try:
        return importlib.import_module("webrtcvad")
    except ModuleNotFoundError:
        return None


def formats_available() -> frozenset[str]:
    """The audio formats this install converts: ``pcm16``, and G.711 with ``audioop``."""
    return frozenset({"pcm16"} | (CONVERTED_FORMATS if _audioop() is not None else set()))


def vad_available() -> bool:
    """Whether ``server_vad`` can run (``webrtcvad`` and ``audioop`` are installed)."""
    return _webrtcvad() is not None and _audioop() is not None


def to_pcm16(data: bytes, fmt: str | None) -> bytes:
    """``data`` in ``fmt`` as pcm16 at the same rate (``None``/``pcm16``: unchanged).

    Raises:
        ValueError: A format this install does not convert.
    """
    if fmt in (None, "pcm16"):
        return data
    op = _audioop() if fmt in CONVERTED_FORMATS else None
    if op is None:
        raise ValueError(f"cannot convert {fmt!r} audio to pcm16")
    return bytes(op.ulaw2lin(data, 2) if fmt == "g711_ulaw" else op.alaw2lin(data, 2))


def from_pcm16(data: bytes, fmt: str | None) -> bytes:
    """pcm16 ``data`` in ``fmt`` (``None``/``pcm16``: unchanged); an odd last byte is dropped.

    Raises:
        ValueError: A format this install does not convert.
    """
    if fmt in (None, "pcm16"):
        return data
    op = _audioop() if fmt in CONVERTED_FORMATS else None
    if op is None:
        raise ValueError(f"cannot convert pcm16 audio to {fmt!r}")
    even = data[: len(data) - len(data) % 2]
    return bytes(op.lin2ulaw(even, 2) if fmt == "g711_ulaw" else op.lin2alaw(even, 2))


def refusal(config: Any, voices: list[str] | None, speaks: bool) -> tuple[str, str] | None:
    """``(field, message)`` for the first voice setting of ``config`` not honoured, or ``None``.

    Args:
        config: The session's :class:`~uamp_proto.types.SessionConfig`.
        voices: The voices the agent declares (``capabilities.audio.voices``).
        speaks: Whether the agent produces audio at all.
    """
    have = formats_available()
    for name in ("input_audio_format", "output_audio_format"):
        fmt = getattr(config, name, None)
        if fmt is not None and fmt not in have:
            why = (
                f"{_VOICE_EXTRA} to have {fmt} converted"
                if fmt in CONVERTED_FORMATS
                else "this server converts pcm16, g711_ulaw and g711_alaw only"
            )
            return name, f"{name} {fmt!r} is not supported: {why}"
    turns = getattr(config, "turn_detection", None)
    if turns is not None:
        kind = turns.get("type") if isinstance(turns, Mapping) else None
        if kind != "server_vad":
            return "turn_detection", (
                f"turn_detection type {kind!r} is not supported: only server_vad (or null)"
            )
        if not vad_available():
            return "turn_detection", f"server_vad needs a voice activity detector: {_VOICE_EXTRA}"
        try:
            TurnSettings.of(turns)
        except ValueError as exc:
            return "turn_detection", str(exc)
    voice = getattr(config, "voice", None)
    if voice is not None:
        wanted = voice.get("voice_id") if isinstance(voice, Mapping) else None
        if not speaks:
            return "voice", "this agent does not speak: it produces no audio for a voice to shape"
        if wanted is not None and voices is not None and wanted not in voices:
            return "voice", f"voice {wanted!r} is not one of this agent's: {', '.join(voices)}"
    return None


@attrs.frozen
class TurnSettings:
    """``server_vad`` settings (OpenAI Realtime's names and defaults)."""

    threshold: float = 0.5
    silence_duration_ms: int = 500
    prefix_padding_ms: int = 300

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> TurnSettings:
        """The settings of a ``turn_detection`` object.

        Raises:
            ValueError: A value out of range or of the wrong type.
        """
        threshold = raw.get("threshold", 0.5)
        silence = raw.get("silence_duration_ms", 500)
        prefix = raw.get("prefix_padding_ms", 300)
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise ValueError("turn_detection.threshold must be a number from 0 to 1")
        if not 0 <= threshold <= 1:
            raise ValueError("turn_detection.threshold must be from 0 to 1")
        for name, value in (("silence_duration_ms", silence), ("prefix_padding_ms", prefix)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10_000:
                raise ValueError(f"turn_detection.{name} must be an integer from 0 to 10000")
        return cls(float(threshold), silence, prefix)

    @property
    def mode(self) -> int:
        """WebRTC's aggressiveness (0..3) for ``threshold``: a higher one hears less speech."""
        return min(3, int(self.threshold * 4))


@attrs.frozen
class TurnEvent:
    """``speech_started`` (``at_ms`` less the prefix padding) or ``speech_stopped``."""

    kind: str
    at_ms: int


class TurnDetector:
    """Finds where speech starts and stops in a stream of pcm16 audio.

    Args:
        settings: The ``server_vad`` settings.
        rate: The audio's sample rate.

    Raises:
        RuntimeError: ``webrtcvad`` or ``audioop`` is not installed.
    """

    def __init__(self, settings: TurnSettings, rate: int = DEFAULT_RATE) -> None:
        vad, op = _webrtcvad(), _audioop()
        if vad is None or op is None:
            raise RuntimeError(f"server_vad needs a voice activity detector: {_VOICE_EXTRA}")
        self.settings = settings
        self.rate = rate
        self._op = op
        self._vad = vad.Vad(settings.mode)
        self._vad_rate = rate if rate in VAD_RATES else 16_000
        self._state: Any = None
        self._frame = self._vad_rate * _FRAME_MS // 1000 * 2
        self._pending = b""
        self._fed_ms = 0
        self._speaking = False
        self._voiced = 0
        self._silent_ms = 0
        self._start_ms = 0

    @property
    def speaking(self) -> bool:
        """Whether a turn is under way."""
        return self._speaking

    def feed(self, pcm16: bytes) -> list[TurnEvent]:
        """Add audio; the turn boundaries it completes, in order."""
        data = pcm16[: len(pcm16) - len(pcm16) % 2]
        if self._vad_rate != self.rate:
            data, self._state = self._op.ratecv(data, 2, 1, self.rate, self._vad_rate, self._state)
        buf = self._pending + data
        out: list[TurnEvent] = []
        step = self._frame
        end = len(buf) - len(buf) % step
        for at in range(0, end, step):
            out.extend(self._frame_is(self._vad.is_speech(buf[at : at + step], self._vad_rate)))
        self._pending = buf[end:]
        return out

    def _frame_is(self, speech: bool) -> list[TurnEvent]:
        self._fed_ms += _FRAME_MS
        s = self.settings
        if not self._speaking:
            self._voiced = self._voiced + 1 if speech else 0
            if self._voiced >= _START_FRAMES:
                self._speaking, self._silent_ms = True, 0
                began = self._fed_ms - _START_FRAMES * _FRAME_MS
                self._start_ms = max(0, began - s.prefix_padding_ms)
                return [TurnEvent("speech_started", self._start_ms)]
            return []
        self._silent_ms = 0 if speech else self._silent_ms + _FRAME_MS
        if self._silent_ms >= max(s.silence_duration_ms, _FRAME_MS):
            self._speaking, self._voiced = False, 0
            return [TurnEvent("speech_stopped", self._fed_ms - self._silent_ms)]
        return []


def decode_b64(chunk: str) -> bytes:
    """A base64 audio chunk's bytes (``b""`` when it is not base64)."""
    try:
        return base64.b64decode(chunk, validate=True)
    except ValueError:
        return b""


def recode_b64(chunk: str, fmt: str) -> str:
    """A base64 pcm16 chunk in ``fmt``, base64 again (what ``audio.delta`` carries)."""
    return base64.b64encode(from_pcm16(decode_b64(chunk), fmt)).decode("ascii")


def pcm16_messages(messages: list[Message], fmt: str) -> list[Message]:
    """``messages`` with every base64 ``audio`` item in ``fmt`` turned into pcm16."""
    out: list[Message] = []
    for message in messages:
        items = message.content_items
        if not items or not any(isinstance(i, AudioContent) and i.format == fmt for i in items):
            out.append(message)
            continue
        converted = [
            attrs.evolve(
                i,
                audio=base64.b64encode(to_pcm16(decode_b64(i.audio), fmt)).decode("ascii"),
                format="pcm16",
            )
            if isinstance(i, AudioContent) and i.format == fmt and isinstance(i.audio, str)
            else i
            for i in items
        ]
        out.append(attrs.evolve(message, content_items=converted))
    return out
