"""Reading OpenAI Realtime client events strictly, and the ``error`` event that refuses one.

Each reader takes a member of a client event and the parameter's path
(``session.tools``, ``item.content[0].audio`` ...) and returns the value, or
raises :class:`RealtimeError` naming that path with an OpenAI-style code
(``invalid_type``, ``missing_required_parameter``, ``invalid_value`` ...).
The session answers the error with :func:`error_event` and goes on. The
audio formats are read in both spellings (GA ``{"type": "audio/pcmu"}``,
beta ``"g711_ulaw"``) into UAMP's format names.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import attrs

from .. import types as ty
from ..errors import UampError
from ._tools import ToolFormError, parse_tool_choice, parse_tools

__all__ = [
    "RealtimeError",
    "error_event",
]

# Realtime audio formats (GA ``{"type": ...}`` and beta names) -> UAMP format names.
_GA_AUDIO = {"audio/pcm": "pcm16", "audio/pcmu": "g711_ulaw", "audio/pcma": "g711_alaw"}
_UAMP_TO_GA_AUDIO = {v: k for k, v in _GA_AUDIO.items()}
_BETA_AUDIO = frozenset({"pcm16", "g711_ulaw", "g711_alaw"})
_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(;[^,;]*)*;base64,(?P<data>.*)$", re.S)


@attrs.define(auto_exc=True)
class RealtimeError(UampError):
    """Bad client input, answered with a Realtime ``error`` event.

    Args:
        message: What is wrong.
        code: OpenAI-style code (``invalid_value``, ``unknown_parameter`` ...).
        param: The offending parameter, if any.
        type: The error type (``invalid_request_error``).
    """

    message: str
    code: str = attrs.field(default="invalid_value", kw_only=True)
    param: str | None = attrs.field(default=None, kw_only=True)
    type: str = attrs.field(default="invalid_request_error", kw_only=True)

    def event(self, event_id: str, client_event_id: str | None = None) -> dict[str, Any]:
        """The ``error`` server event."""
        return error_event(
            event_id,
            self.message,
            code=self.code,
            param=self.param,
            type=self.type,
            client_event_id=client_event_id,
        )


def error_event(
    event_id: str,
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    type: str = "invalid_request_error",
    client_event_id: str | None = None,
) -> dict[str, Any]:
    """A Realtime ``error`` event."""
    return {
        "type": "error",
        "event_id": event_id,
        "error": {
            "type": type,
            "code": code,
            "message": message,
            "param": param,
            "event_id": client_event_id,
        },
    }


# --- validation helpers ---------------------------------------------------------------------


def _obj(value: object, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RealtimeError(f"'{param}' must be an object.", code="invalid_type", param=param)
    return value


def _opt_str(obj: dict[str, Any], key: str, param: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise RealtimeError(f"'{param}' must be a string.", code="invalid_type", param=param)
    return value


def _req_str(obj: dict[str, Any], key: str, param: str) -> str:
    value = _opt_str(obj, key, param)
    if value is None:
        raise RealtimeError(
            f"Missing required parameter: '{param}'.",
            code="missing_required_parameter",
            param=param,
        )
    return value


def _b64_bytes(value: str, param: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise RealtimeError(f"'{param}' must be base64-encoded audio.", param=param) from None


def _modalities(value: object, param: str) -> list[str]:
    if not isinstance(value, list) or not all(m in ("text", "audio") for m in value):
        raise RealtimeError(f"'{param}' must be a list of 'text' and 'audio'.", param=param)
    return list(value)


def _tool_error(exc: ToolFormError) -> RealtimeError:
    return RealtimeError(exc.message, code=exc.code, param=exc.param)


def _tools(value: object, param: str) -> list[ty.ToolDefinition]:
    if value is None:
        raise RealtimeError(f"'{param}' must be an array.", code="invalid_type", param=param)
    try:
        return parse_tools(value, param, flat=True)
    except ToolFormError as exc:
        raise _tool_error(exc) from None


def _tool_choice(value: object, param: str) -> str | dict[str, Any]:
    try:
        choice = parse_tool_choice(value, param, flat=True)
    except ToolFormError as exc:
        raise _tool_error(exc) from None
    if choice is None:
        raise RealtimeError(f"'{param}' must be an object.", code="invalid_type", param=param)
    return choice


def _max_tokens(value: object, param: str) -> int | None:
    if value is None or value == "inf":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    raise RealtimeError(f"'{param}' must be a positive integer or 'inf'.", param=param)


def _audio_format(value: object, param: str) -> str:
    if isinstance(value, str) and value in _BETA_AUDIO:
        return value
    if isinstance(value, dict) and value.get("type") in _GA_AUDIO:
        return _GA_AUDIO[value["type"]]
    raise RealtimeError(
        f"'{param}' must be one of audio/pcm, audio/pcmu, audio/pcma "
        "(beta: pcm16, g711_ulaw, g711_alaw).",
        param=param,
    )
