"""Hand-written structure and unstructure hooks for the hottest events.

Theory of operation
-------------------
cattrs' generated hooks are general: they call one hook per field, build every
instance through attrs' keyword ``__init__`` (which, for a frozen class, sets
each slot through ``object.__setattr__``) and look the unknown keys up one by
one. The hooks here do the same work for the events a busy connection carries
most (``response.delta`` above all, then ``input.text``, ``session.create``,
``response.done``, ``tool.call`` and ``thinking``), and for the types nested
in them, with three shortcuts:

* strict type checks are inlined (``type(v) is str``); ``bool`` never passes
  for a number because ``type(True) is bool``;
* an instance is made as a private, mutable subclass of its class (see
  :func:`_builder`), filled with plain attribute stores, which the
  interpreter turns into direct slot writes, and then given its real class
  by assigning ``__class__``: about five times as fast as the frozen attrs
  ``__init__``, which sets every slot through ``object.__setattr__``. Every
  hook sets every field; the tests check no slot is left unset;
* the ``unknown`` bag is built only when ``known.issuperset(obj)`` says there
  is something to keep.

The contract with :mod:`uamp_proto.codec`:

* a structure hook returns exactly what the generic converter returns for the
  same input, or raises any exception. It may decline anything unusual (an
  integer spelled ``5.0``, a content item type without a fast hook is handed
  to the generic hook): ``decode`` then re-runs the generic converter, and
  only if that fails too the detailed one, for the error message;
* an unstructure hook returns the same dict as the generic hook, with the same
  key order: ``"type"`` first, then the required fields, then the optional
  ones present (cattrs' order: both in declaration order), then the unknown
  keys.

``tests/proto/test_codec_hypothesis.py`` checks both halves against the
generic converter on random events.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
from cattrs import Converter

from . import events as ev
from . import types as ty
from .errors import UampError
from .types import EMPTY

__all__ = ["structure_hooks", "unstructure_hooks"]

_Structure = Callable[[Any], Any]
_Unstructure = Callable[[Any], Any]


class _Decline(UampError):
    """The fast path does not take this input; the generic path decides."""


def _builder(cls: type[Any]) -> type[Any]:
    """A private subclass of frozen ``cls`` whose instances take plain stores.

    It adds no slot, so a filled-in instance becomes a true ``cls`` by
    assigning its ``__class__`` (CPython allows that between classes of one
    layout). Putting back ``object``'s ``__setattr__`` *and* ``__delattr__``
    (both share one type slot) gives the class the generic attribute setter,
    which the interpreter specialises into a direct slot store; restoring only
    one of them would keep the slow, generic call. ``object.__init__`` lets
    ``builder()`` allocate through the type's own call, cheaper than
    ``object.__new__(builder)``.
    """
    namespace = {
        "__slots__": (),
        "__init__": object.__init__,
        "__setattr__": object.__setattr__,
        "__delattr__": object.__delattr__,
        "__module__": __name__,
    }
    return type(f"_{cls.__name__}Builder", (cls,), namespace)


def _known(cls: type[Any]) -> frozenset[str]:
    """The wire keys ``cls`` declares (its tag included)."""
    keys = {f.name for f in attrs.fields(cls) if f.name != "unknown"}
    if isinstance(getattr(cls, "type", None), str):
        keys.add("type")
    return frozenset(keys)


def _extra(obj: dict[str, Any], known: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in known}


# The generic hooks of types without a fast one, filled in by structure_hooks()
# and unstructure_hooks() from the codec's converter.
_S_CONTENT: dict[str, _Structure] = {}
_U_CONTENT: dict[type[Any], _Unstructure] = {}
_S_GENERIC: dict[type[Any], _Structure] = {}
_U_GENERIC: dict[type[Any], _Unstructure] = {}


# --- media --------------------------------------------------------------------

_MEDIA_URL_KNOWN = _known(ty.MediaURL)


def _s_media(value: Any) -> Any:
    if type(value) is str:
        return value
    if type(value) is not dict:
        raise _Decline
    url = value["url"]
    if type(url) is not str:
        raise _Decline
    obj = _B_MEDIA_URL()
    obj.url = url
    obj.unknown = EMPTY if _MEDIA_URL_KNOWN.issuperset(value) else _extra(value, _MEDIA_URL_KNOWN)
    obj.__class__ = ty.MediaURL
    return obj


_B_MEDIA_URL = _builder(ty.MediaURL)


def _u_media(value: Any) -> Any:
    if type(value) is str:
        return value
    out: dict[str, Any] = {"url": value.url}
    extra = value.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


# Module-level names for the classes the hottest hooks touch: one lookup less.
_DeltaText = ty.DeltaText
_ResponseDelta = ev.ResponseDelta
_FunctionDefinition = ty.FunctionDefinition
_ToolDefinition = ty.ToolDefinition
_SessionConfig = ty.SessionConfig
_SessionCreate = ev.SessionCreate

# --- deltas (section 6.6) -------------------------------------------------------

_DT_KNOWN = _known(ty.DeltaText)
_B_DELTA_TEXT = _builder(ty.DeltaText)


def _s_delta_text(d: dict[str, Any]) -> Any:
    text = d["text"]
    if type(text) is not str:
        raise _Decline
    obj = _B_DELTA_TEXT()
    obj.text = text
    obj.unknown = EMPTY if len(d) == 2 else _extra(d, _DT_KNOWN)
    obj.__class__ = ty.DeltaText
    return obj


def _u_delta_text(obj: ty.DeltaText) -> dict[str, Any]:
    out = {"type": "text", "text": obj.text}
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_DA_KNOWN = _known(ty.DeltaAudio)
_B_DELTA_AUDIO = _builder(ty.DeltaAudio)


def _s_delta_audio(d: dict[str, Any]) -> Any:
    audio = d["audio"]
    if type(audio) is not str:
        raise _Decline
    obj = _B_DELTA_AUDIO()
    obj.audio = audio
    obj.unknown = EMPTY if len(d) == 2 else _extra(d, _DA_KNOWN)
    obj.__class__ = ty.DeltaAudio
    return obj


def _u_delta_audio(obj: ty.DeltaAudio) -> dict[str, Any]:
    out = {"type": "audio", "audio": obj.audio}
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_TCF_KNOWN = _known(ty.ToolCallFragment)
_B_TOOL_CALL_FRAGMENT = _builder(ty.ToolCallFragment)
_DTC_KNOWN = _known(ty.DeltaToolCall)
_B_DELTA_TOOL_CALL = _builder(ty.DeltaToolCall)


def _s_delta_tool_call(d: dict[str, Any]) -> Any:
    f = d["tool_call"]
    if type(f) is not dict:
        raise _Decline
    call_id = f["id"]
    name = f.get("name")
    arguments = f.get("arguments")
    if (
        type(call_id) is not str
        or (name is not None and type(name) is not str)
        or (arguments is not None and type(arguments) is not str)
    ):
        raise _Decline
    fragment = _B_TOOL_CALL_FRAGMENT()
    fragment.id = call_id
    fragment.name = name
    fragment.arguments = arguments
    fragment.unknown = EMPTY if _TCF_KNOWN.issuperset(f) else _extra(f, _TCF_KNOWN)
    fragment.__class__ = ty.ToolCallFragment
    obj = _B_DELTA_TOOL_CALL()
    obj.tool_call = fragment
    obj.unknown = EMPTY if _DTC_KNOWN.issuperset(d) else _extra(d, _DTC_KNOWN)
    obj.__class__ = ty.DeltaToolCall
    return obj


def _u_delta_tool_call(obj: ty.DeltaToolCall) -> dict[str, Any]:
    f = obj.tool_call
    call: dict[str, Any] = {"id": f.id}
    if f.name is not None:
        call["name"] = f.name
    if f.arguments is not None:
        call["arguments"] = f.arguments
    extra = f.unknown
    if extra is not EMPTY and extra:
        call.update(extra)
    out = {"type": "tool_call", "tool_call": call}
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_TRF_KNOWN = _known(ty.ToolResultFragment)
_B_TOOL_RESULT_FRAGMENT = _builder(ty.ToolResultFragment)
_DTR_KNOWN = _known(ty.DeltaToolResult)
_B_DELTA_TOOL_RESULT = _builder(ty.DeltaToolResult)


def _s_delta_tool_result(d: dict[str, Any]) -> Any:
    f = d["tool_result"]
    if type(f) is not dict:
        raise _Decline
    call_id = f["call_id"]
    result = f.get("result")
    status = f.get("status")
    if (
        type(call_id) is not str
        or (result is not None and type(result) is not str)
        or (status is not None and type(status) is not str)
    ):
        raise _Decline
    fragment = _B_TOOL_RESULT_FRAGMENT()
    fragment.call_id = call_id
    fragment.result = result
    fragment.status = status
    fragment.unknown = EMPTY if _TRF_KNOWN.issuperset(f) else _extra(f, _TRF_KNOWN)
    fragment.__class__ = ty.ToolResultFragment
    obj = _B_DELTA_TOOL_RESULT()
    obj.tool_result = fragment
    obj.unknown = EMPTY if _DTR_KNOWN.issuperset(d) else _extra(d, _DTR_KNOWN)
    obj.__class__ = ty.DeltaToolResult
    return obj


def _u_delta_tool_result(obj: ty.DeltaToolResult) -> dict[str, Any]:
    f = obj.tool_result
    result: dict[str, Any] = {"call_id": f.call_id}
    if f.result is not None:
        result["result"] = f.result
    if f.status is not None:
        result["status"] = f.status
    extra = f.unknown
    if extra is not EMPTY and extra:
        result.update(extra)
    out = {"type": "tool_result", "tool_result": result}
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_TP_KNOWN = _known(ty.ToolProgress)
_B_TOOL_PROGRESS = _builder(ty.ToolProgress)
_DTP_KNOWN = _known(ty.DeltaToolProgress)
_B_DELTA_TOOL_PROGRESS = _builder(ty.DeltaToolProgress)


def _s_delta_tool_progress(d: dict[str, Any]) -> Any:
    f = d["tool_progress"]
    if type(f) is not dict:
        raise _Decline
    call_id = f["call_id"]
    text = f["text"]
    if type(call_id) is not str or type(text) is not str:
        raise _Decline
    progress = _B_TOOL_PROGRESS()
    progress.call_id = call_id
    progress.text = text
    progress.unknown = EMPTY if _TP_KNOWN.issuperset(f) else _extra(f, _TP_KNOWN)
    progress.__class__ = ty.ToolProgress
    obj = _B_DELTA_TOOL_PROGRESS()
    obj.tool_progress = progress
    obj.unknown = EMPTY if _DTP_KNOWN.issuperset(d) else _extra(d, _DTP_KNOWN)
    obj.__class__ = ty.DeltaToolProgress
    return obj


def _u_delta_tool_progress(obj: ty.DeltaToolProgress) -> dict[str, Any]:
    p = obj.tool_progress
    progress: dict[str, Any] = {"call_id": p.call_id, "text": p.text}
    extra = p.unknown
    if extra is not EMPTY and extra:
        progress.update(extra)
    out = {"type": "tool_progress", "tool_progress": progress}
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_S_DELTA: dict[str, _Structure] = {
    "text": _s_delta_text,
    "audio": _s_delta_audio,
    "tool_call": _s_delta_tool_call,
    "tool_result": _s_delta_tool_result,
    "tool_progress": _s_delta_tool_progress,
}
_U_DELTA: dict[type[Any], _Unstructure] = {
    ty.DeltaText: _u_delta_text,
    ty.DeltaAudio: _u_delta_audio,
    ty.DeltaToolCall: _u_delta_tool_call,
    ty.DeltaToolResult: _u_delta_tool_result,
    ty.DeltaToolProgress: _u_delta_tool_progress,
    ty.DeltaUnknown: lambda obj: obj.raw,
}


def _s_delta(value: Any) -> Any:
    if type(value) is not dict:
        raise _Decline
    tag = value["type"]
    hook = _S_DELTA.get(tag)
    if hook is not None:
        return hook(value)
    if type(tag) is str:  # a delta type this version does not know (14.3)
        return ty.DeltaUnknown(raw=value)
    raise _Decline


# --- content items and messages (sections 8.4, 8.5) ----------------------------

_TEXT_KNOWN = _known(ty.TextContent)
_B_TEXT_CONTENT = _builder(ty.TextContent)


def _s_text(d: dict[str, Any]) -> Any:
    text = d["text"]
    if type(text) is not str:
        raise _Decline
    obj = _B_TEXT_CONTENT()
    obj.text = text
    obj.unknown = EMPTY if len(d) == 2 else _extra(d, _TEXT_KNOWN)
    obj.__class__ = ty.TextContent
    return obj


def _u_text(obj: ty.TextContent) -> dict[str, Any]:
    out = {"type": "text", "text": obj.text}
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_IMAGE_KNOWN = _known(ty.ImageContent)
_B_IMAGE_CONTENT = _builder(ty.ImageContent)


def _s_image(d: dict[str, Any]) -> Any:
    image = _s_media(d["image"])
    fmt = d.get("format")
    detail = d.get("detail")
    alt_text = d.get("alt_text")
    content_id = d.get("content_id")
    if (
        (fmt is not None and type(fmt) is not str)
        or (detail is not None and type(detail) is not str)
        or (alt_text is not None and type(alt_text) is not str)
        or (content_id is not None and type(content_id) is not str)
    ):
        raise _Decline
    obj = _B_IMAGE_CONTENT()
    obj.image = image
    obj.format = fmt
    obj.detail = detail
    obj.alt_text = alt_text
    obj.content_id = content_id
    obj.unknown = EMPTY if _IMAGE_KNOWN.issuperset(d) else _extra(d, _IMAGE_KNOWN)
    obj.__class__ = ty.ImageContent
    return obj


def _u_image(obj: ty.ImageContent) -> dict[str, Any]:
    out = {"type": "image", "image": _u_media(obj.image)}
    if obj.format is not None:
        out["format"] = obj.format
    if obj.detail is not None:
        out["detail"] = obj.detail
    if obj.alt_text is not None:
        out["alt_text"] = obj.alt_text
    if obj.content_id is not None:
        out["content_id"] = obj.content_id
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_INVOCATION_KNOWN = _known(ty.ToolInvocation)
_B_TOOL_INVOCATION = _builder(ty.ToolInvocation)


def _s_invocation(d: Any) -> Any:
    if type(d) is not dict:
        raise _Decline
    if "name" not in d:
        function = d.get("function")
        if type(function) is dict:
            # OpenAI's nested form, normalised to UAMP's flat one (section 8.5);
            # its "type": "function" is dropped like the generic hook does.
            d = {
                "id": d.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments", ""),
            }
    call_id = d["id"]
    name = d["name"]
    arguments = d["arguments"]
    if type(call_id) is not str or type(name) is not str or type(arguments) is not str:
        raise _Decline
    obj = _B_TOOL_INVOCATION()
    obj.id = call_id
    obj.name = name
    obj.arguments = arguments
    unknown: Any = EMPTY
    if not _INVOCATION_KNOWN.issuperset(d):
        unknown = {k: v for k, v in d.items() if k not in _INVOCATION_KNOWN and k != "type"}
        if not unknown:
            unknown = EMPTY
    obj.unknown = unknown
    obj.__class__ = ty.ToolInvocation
    return obj


def _u_invocation(obj: ty.ToolInvocation) -> dict[str, Any]:
    out = {"id": obj.id, "name": obj.name, "arguments": obj.arguments}
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_TOOL_CALL_KNOWN = _known(ty.ToolCallContent)
_B_TOOL_CALL_CONTENT = _builder(ty.ToolCallContent)


def _s_tool_call_content(d: dict[str, Any]) -> Any:
    call = _s_invocation(d["tool_call"])
    obj = _B_TOOL_CALL_CONTENT()
    obj.tool_call = call
    obj.unknown = EMPTY if _TOOL_CALL_KNOWN.issuperset(d) else _extra(d, _TOOL_CALL_KNOWN)
    obj.__class__ = ty.ToolCallContent
    return obj


def _u_tool_call_content(obj: ty.ToolCallContent) -> dict[str, Any]:
    out = {"type": "tool_call", "tool_call": _u_invocation(obj.tool_call)}
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_THINKING_KNOWN = _known(ty.ThinkingContent)
_B_THINKING_CONTENT = _builder(ty.ThinkingContent)


def _s_thinking_content(d: dict[str, Any]) -> Any:
    thinking = d["thinking"]
    stage = d.get("stage")
    redacted = d.get("redacted")
    if (
        type(thinking) is not str
        or (stage is not None and type(stage) is not str)
        or (redacted is not None and type(redacted) is not bool)
    ):
        raise _Decline
    obj = _B_THINKING_CONTENT()
    obj.thinking = thinking
    obj.stage = stage
    obj.redacted = redacted
    obj.unknown = EMPTY if _THINKING_KNOWN.issuperset(d) else _extra(d, _THINKING_KNOWN)
    obj.__class__ = ty.ThinkingContent
    return obj


def _u_thinking_content(obj: ty.ThinkingContent) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "thinking", "thinking": obj.thinking}
    if obj.stage is not None:
        out["stage"] = obj.stage
    if obj.redacted is not None:
        out["redacted"] = obj.redacted
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


def _s_content(value: Any) -> Any:
    if type(value) is not dict:
        raise _Decline
    tag = value["type"]
    hook = _S_CONTENT.get(tag)
    if hook is not None:
        return hook(value)
    if type(tag) is str:  # a content type this version does not know (14.3)
        return ty.UnknownContent(raw=value)
    raise _Decline


def _s_contents(value: Any) -> Any:
    if type(value) is not list:
        raise _Decline
    return [_s_content(item) for item in value]


def _u_contents(items: list[Any]) -> list[Any]:
    table = _U_CONTENT
    return [table[type(item)](item) for item in items]


_MESSAGE_KNOWN = _known(ty.Message)
_B_MESSAGE = _builder(ty.Message)


def _s_message(d: Any) -> Any:
    if type(d) is not dict:
        raise _Decline
    role = d["role"]
    content = d.get("content")
    items = d.get("content_items")
    name = d.get("name")
    tool_call_id = d.get("tool_call_id")
    calls = d.get("tool_calls")
    if (
        type(role) is not str
        or (content is not None and type(content) is not str)
        or (name is not None and type(name) is not str)
        or (tool_call_id is not None and type(tool_call_id) is not str)
    ):
        raise _Decline
    if items is not None:
        items = _s_contents(items)
    if calls is not None:
        if type(calls) is not list:
            raise _Decline
        calls = [_s_invocation(c) for c in calls]
    obj = _B_MESSAGE()
    obj.role = role
    obj.content = content
    obj.content_items = items
    obj.name = name
    obj.tool_call_id = tool_call_id
    obj.tool_calls = calls
    obj.unknown = EMPTY if _MESSAGE_KNOWN.issuperset(d) else _extra(d, _MESSAGE_KNOWN)
    obj.__class__ = ty.Message
    return obj


def _u_message(obj: ty.Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": obj.role}
    if obj.content is not None:
        out["content"] = obj.content
    if obj.content_items is not None:
        out["content_items"] = _u_contents(obj.content_items)
    if obj.name is not None:
        out["name"] = obj.name
    if obj.tool_call_id is not None:
        out["tool_call_id"] = obj.tool_call_id
    if obj.tool_calls is not None:
        out["tool_calls"] = [_u_invocation(c) for c in obj.tool_calls]
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


# --- tools and session configuration (sections 8.1, 8.6) -----------------------

_FUNCTION_KNOWN = _known(ty.FunctionDefinition)
_B_FUNCTION_DEFINITION = _builder(ty.FunctionDefinition)


def _s_function(d: Any) -> Any:
    if type(d) is not dict:
        raise _Decline
    name = d["name"]
    if type(name) is not str:
        raise _Decline
    description = d.get("description")
    parameters = d.get("parameters")
    strict = d.get("strict")
    extra = len(d) - 1  # keys not yet accounted for; see _s_response_delta
    if description is not None:
        if type(description) is not str:
            raise _Decline
        extra -= 1
    if parameters is not None:
        if type(parameters) is not dict:
            raise _Decline
        extra -= 1
    if strict is not None:
        if type(strict) is not bool:
            raise _Decline
        extra -= 1
    obj = _B_FUNCTION_DEFINITION()
    obj.name = name
    obj.description = description
    obj.parameters = parameters
    obj.strict = strict
    obj.unknown = (
        EMPTY if extra == 0 or _FUNCTION_KNOWN.issuperset(d) else _extra(d, _FUNCTION_KNOWN)
    )
    obj.__class__ = _FunctionDefinition
    return obj


def _u_function(obj: ty.FunctionDefinition) -> dict[str, Any]:
    out: dict[str, Any] = {"name": obj.name}
    if obj.description is not None:
        out["description"] = obj.description
    if obj.parameters is not None:
        out["parameters"] = obj.parameters
    if obj.strict is not None:
        out["strict"] = obj.strict
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_TOOL_KNOWN = _known(ty.ToolDefinition)
_B_TOOL_DEFINITION = _builder(ty.ToolDefinition)


def _s_tool(d: Any) -> Any:
    if type(d) is not dict:
        raise _Decline
    kind = d.get("type", "function")  # the field's default (section 8.6)
    if type(kind) is not str:
        raise _Decline
    function = _s_function(d["function"])
    obj = _B_TOOL_DEFINITION()
    obj.type = kind
    obj.function = function
    size = len(d)
    obj.unknown = (
        EMPTY
        if size == 1 or (size == 2 and "type" in d) or _TOOL_KNOWN.issuperset(d)
        else _extra(d, _TOOL_KNOWN)
    )
    obj.__class__ = _ToolDefinition
    return obj


def _u_tool(obj: ty.ToolDefinition) -> dict[str, Any]:
    out: dict[str, Any] = {"type": obj.type, "function": _u_function(obj.function)}
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_FORMAT_KNOWN = _known(ty.ResponseFormat)
_B_RESPONSE_FORMAT = _builder(ty.ResponseFormat)


def _s_response_format(d: Any) -> Any:
    if type(d) is not dict:
        raise _Decline
    kind = d["type"]
    schema = d.get("json_schema")
    if type(kind) is not str or (schema is not None and type(schema) is not dict):
        raise _Decline
    obj = _B_RESPONSE_FORMAT()
    obj.type = kind
    obj.json_schema = schema
    obj.unknown = EMPTY if _FORMAT_KNOWN.issuperset(d) else _extra(d, _FORMAT_KNOWN)
    obj.__class__ = ty.ResponseFormat
    return obj


def _u_response_format(obj: ty.ResponseFormat) -> dict[str, Any]:
    out: dict[str, Any] = {"type": obj.type}
    if obj.json_schema is not None:
        out["json_schema"] = obj.json_schema
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_CONFIG_KNOWN = _known(ty.SessionConfig)
_B_SESSION_CONFIG = _builder(ty.SessionConfig)


def _s_session_config(d: Any) -> Any:
    if type(d) is not dict:
        raise _Decline
    modalities = d["modalities"]
    if type(modalities) is not list:
        raise _Decline
    for modality in modalities:
        if type(modality) is not str:
            raise _Decline
    instructions = d.get("instructions")
    tools = d.get("tools")
    voice = d.get("voice")
    in_format = d.get("input_audio_format")
    out_format = d.get("output_audio_format")
    turn_detection = d.get("turn_detection")
    response_format = d.get("response_format")
    extensions = d.get("extensions")
    extra = len(d) - 1  # keys not yet accounted for; see _s_response_delta
    if instructions is not None:
        if type(instructions) is not str:
            raise _Decline
        extra -= 1
    if tools is not None:
        if type(tools) is not list:
            raise _Decline
        tools = [_s_tool(t) for t in tools]
        extra -= 1
    if voice is not None:
        if type(voice) is not dict:
            raise _Decline
        extra -= 1
    if in_format is not None:
        if type(in_format) is not str:
            raise _Decline
        extra -= 1
    if out_format is not None:
        if type(out_format) is not str:
            raise _Decline
        extra -= 1
    if turn_detection is not None:
        if type(turn_detection) is not dict:
            raise _Decline
        extra -= 1
    if response_format is not None:
        response_format = _s_response_format(response_format)
        extra -= 1
    if extensions is not None:
        if type(extensions) is not dict:
            raise _Decline
        extra -= 1
    obj = _B_SESSION_CONFIG()
    obj.modalities = modalities.copy()
    obj.instructions = instructions
    obj.tools = tools
    obj.voice = voice
    obj.input_audio_format = in_format
    obj.output_audio_format = out_format
    obj.turn_detection = turn_detection
    obj.response_format = response_format
    obj.extensions = extensions
    obj.unknown = EMPTY if extra == 0 or _CONFIG_KNOWN.issuperset(d) else _extra(d, _CONFIG_KNOWN)
    obj.__class__ = _SessionConfig
    return obj


def _u_session_config(obj: ty.SessionConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"modalities": list(obj.modalities)}
    if obj.instructions is not None:
        out["instructions"] = obj.instructions
    if obj.tools is not None:
        out["tools"] = [_u_tool(t) for t in obj.tools]
    if obj.voice is not None:
        out["voice"] = obj.voice
    if obj.input_audio_format is not None:
        out["input_audio_format"] = obj.input_audio_format
    if obj.output_audio_format is not None:
        out["output_audio_format"] = obj.output_audio_format
    if obj.turn_detection is not None:
        out["turn_detection"] = obj.turn_detection
    if obj.response_format is not None:
        out["response_format"] = _u_response_format(obj.response_format)
    if obj.extensions is not None:
        out["extensions"] = obj.extensions
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


# --- usage (section 8.7) ---------------------------------------------------------

_COST_KNOWN = _known(ty.UsageCost)
_B_USAGE_COST = _builder(ty.UsageCost)


def _is_number(value: Any) -> bool:
    kind = type(value)
    return kind is float or kind is int


def _s_cost(d: Any) -> Any:
    if type(d) is not dict:
        raise _Decline
    input_cost = d.get("input_cost")
    output_cost = d.get("output_cost")
    total_cost = d.get("total_cost")
    currency = d.get("currency")
    if (
        (input_cost is not None and not _is_number(input_cost))
        or (output_cost is not None and not _is_number(output_cost))
        or (total_cost is not None and not _is_number(total_cost))
        or (currency is not None and type(currency) is not str)
    ):
        raise _Decline
    obj = _B_USAGE_COST()
    obj.input_cost = input_cost
    obj.output_cost = output_cost
    obj.total_cost = total_cost
    obj.currency = currency
    obj.unknown = EMPTY if _COST_KNOWN.issuperset(d) else _extra(d, _COST_KNOWN)
    obj.__class__ = ty.UsageCost
    return obj


def _u_cost(obj: ty.UsageCost) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if obj.input_cost is not None:
        out["input_cost"] = obj.input_cost
    if obj.output_cost is not None:
        out["output_cost"] = obj.output_cost
    if obj.total_cost is not None:
        out["total_cost"] = obj.total_cost
    if obj.currency is not None:
        out["currency"] = obj.currency
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_USAGE_KNOWN = _known(ty.UsageStats)
_B_USAGE_STATS = _builder(ty.UsageStats)


def _s_usage(d: Any) -> Any:
    if type(d) is not dict:
        raise _Decline
    input_tokens = d.get("input_tokens")
    output_tokens = d.get("output_tokens")
    total_tokens = d.get("total_tokens")
    cached_tokens = d.get("cached_tokens")
    cost = d.get("cost")
    audio = d.get("audio")
    # Integers only: the generic hook also takes 5.0 (and makes it 5); the
    # fast path leaves that rare spelling to it.
    if (
        (input_tokens is not None and type(input_tokens) is not int)
        or (output_tokens is not None and type(output_tokens) is not int)
        or (total_tokens is not None and type(total_tokens) is not int)
        or (cached_tokens is not None and type(cached_tokens) is not int)
    ):
        raise _Decline
    if cost is not None:
        cost = _s_cost(cost)
    if audio is not None:
        audio = _S_GENERIC[ty.AudioUsage](audio)
    obj = _B_USAGE_STATS()
    obj.input_tokens = input_tokens
    obj.output_tokens = output_tokens
    obj.total_tokens = total_tokens
    obj.cached_tokens = cached_tokens
    obj.cost = cost
    obj.audio = audio
    obj.unknown = EMPTY if _USAGE_KNOWN.issuperset(d) else _extra(d, _USAGE_KNOWN)
    obj.__class__ = ty.UsageStats
    return obj


def _u_usage(obj: ty.UsageStats) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if obj.input_tokens is not None:
        out["input_tokens"] = obj.input_tokens
    if obj.output_tokens is not None:
        out["output_tokens"] = obj.output_tokens
    if obj.total_tokens is not None:
        out["total_tokens"] = obj.total_tokens
    if obj.cached_tokens is not None:
        out["cached_tokens"] = obj.cached_tokens
    if obj.cost is not None:
        out["cost"] = _u_cost(obj.cost)
    if obj.audio is not None:
        out["audio"] = _U_GENERIC[ty.AudioUsage](obj.audio)
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_OUTPUT_KNOWN = _known(ty.ResponseOutput)
_B_RESPONSE_OUTPUT = _builder(ty.ResponseOutput)


def _s_response_output(d: Any) -> Any:
    if type(d) is not dict:
        raise _Decline
    status = d["status"]
    output = _s_contents(d["output"])
    response_id = d.get("id")
    usage = d.get("usage")
    if type(status) is not str or (response_id is not None and type(response_id) is not str):
        raise _Decline
    if usage is not None:
        usage = _s_usage(usage)
    obj = _B_RESPONSE_OUTPUT()
    obj.status = status
    obj.output = output
    obj.id = response_id
    obj.usage = usage
    obj.unknown = EMPTY if _OUTPUT_KNOWN.issuperset(d) else _extra(d, _OUTPUT_KNOWN)
    obj.__class__ = ty.ResponseOutput
    return obj


def _u_response_output(obj: ty.ResponseOutput) -> dict[str, Any]:
    out: dict[str, Any] = {"status": obj.status, "output": _u_contents(obj.output)}
    if obj.id is not None:
        out["id"] = obj.id
    if obj.usage is not None:
        out["usage"] = _u_usage(obj.usage)
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


# --- events ------------------------------------------------------------------------
#
# Every event starts with the base fields of section 4 (event_id, timestamp,
# session_id), checked inline: a helper call per event costs more than the
# checks themselves.

_RD_KNOWN = _known(ev.ResponseDelta)
_B_RESPONSE_DELTA = _builder(ev.ResponseDelta)


def _s_response_delta(d: dict[str, Any], _: Any) -> Any:
    event_id = d.get("event_id")
    response_id = d.get("response_id")
    unknown: Any
    if len(d) == 4 and type(event_id) is str and type(response_id) is str:
        # The usual shape (section 6.6): with "type" and "delta", the two ids
        # make four keys, so nothing else is there. (Were "delta" one of the
        # missing ones, d["delta"] below declines.)
        timestamp = session_id = delta_seq = None
        unknown = EMPTY
    else:
        timestamp = d.get("timestamp")
        session_id = d.get("session_id")
        delta_seq = d.get("delta_seq")
        # Counting the known keys found is cheaper than _RD_KNOWN.issuperset(d);
        # a key present with a null value sends it to the full check.
        extra = len(d) - 2  # "type" and "delta"
        if event_id is not None:
            if type(event_id) is not str:
                raise _Decline
            extra -= 1
        if timestamp is not None:
            if type(timestamp) is not float and type(timestamp) is not int:
                raise _Decline
            extra -= 1
        if session_id is not None:
            if type(session_id) is not str:
                raise _Decline
            extra -= 1
        if response_id is not None:
            if type(response_id) is not str:
                raise _Decline
            extra -= 1
        if delta_seq is not None:
            if type(delta_seq) is not int:
                raise _Decline
            extra -= 1
        unknown = EMPTY if extra == 0 or _RD_KNOWN.issuperset(d) else _extra(d, _RD_KNOWN)
    delta = d["delta"]
    # (A delta that is not an object fails delta["type"] with a TypeError.)
    if delta["type"] == "text":
        # Text deltas are the bulk of a stream: built here, without a call.
        text = delta["text"]
        if type(text) is not str:
            raise _Decline
        item = _B_DELTA_TEXT()
        item.text = text
        # Both keys were read, so two keys means no unknown ones.
        item.unknown = EMPTY if len(delta) == 2 else _extra(delta, _DT_KNOWN)
        item.__class__ = _DeltaText
        delta = item
    else:
        delta = _s_delta(delta)
    obj = _B_RESPONSE_DELTA()
    obj.event_id = event_id
    obj.timestamp = timestamp
    obj.session_id = session_id
    obj.unknown = unknown
    obj.delta = delta
    obj.response_id = response_id
    obj.delta_seq = delta_seq
    obj.__class__ = _ResponseDelta
    return obj


def _u_response_delta(obj: ev.ResponseDelta) -> dict[str, Any]:
    delta = obj.delta
    if type(delta) is _DeltaText:
        unknown = delta.unknown
        if unknown is EMPTY or not unknown:
            delta_out = {"type": "text", "text": delta.text}
        else:
            delta_out = {"type": "text", "text": delta.text, **unknown}
    else:
        delta_out = _U_DELTA[type(delta)](delta)
    event_id = obj.event_id
    timestamp = obj.timestamp
    session_id = obj.session_id
    response_id = obj.response_id
    delta_seq = obj.delta_seq
    unknown = obj.unknown
    if (
        timestamp is None
        and session_id is None
        and delta_seq is None
        and event_id is not None
        and response_id is not None
        and (unknown is EMPTY or not unknown)
    ):
        # The usual shape, built in one go.
        return {
            "type": "response.delta",
            "delta": delta_out,
            "event_id": event_id,
            "response_id": response_id,
        }
    out: dict[str, Any] = {"type": "response.delta", "delta": delta_out}
    if event_id is not None:
        out["event_id"] = event_id
    if timestamp is not None:
        out["timestamp"] = timestamp
    if session_id is not None:
        out["session_id"] = session_id
    if response_id is not None:
        out["response_id"] = response_id
    if delta_seq is not None:
        out["delta_seq"] = delta_seq
    if unknown:
        out.update(unknown)
    return out


_IT_KNOWN = _known(ev.InputText)
_B_INPUT_TEXT = _builder(ev.InputText)


def _s_input_text(d: dict[str, Any], _: Any) -> Any:
    event_id = d.get("event_id")
    timestamp = d.get("timestamp")
    session_id = d.get("session_id")
    text = d["text"]
    role = d.get("role")
    messages = d.get("messages")
    payment_token = d.get("payment_token")
    context = d.get("context")
    if (
        (event_id is not None and type(event_id) is not str)
        or (timestamp is not None and type(timestamp) is not float and type(timestamp) is not int)
        or (session_id is not None and type(session_id) is not str)
        or type(text) is not str
        or (role is not None and type(role) is not str)
        or (payment_token is not None and type(payment_token) is not str)
        or (context is not None and type(context) is not dict)
    ):
        raise _Decline
    if messages is not None:
        if type(messages) is not list:
            raise _Decline
        messages = [_s_message(m) for m in messages]
    obj = _B_INPUT_TEXT()
    obj.event_id = event_id
    obj.timestamp = timestamp
    obj.session_id = session_id
    obj.unknown = EMPTY if _IT_KNOWN.issuperset(d) else _extra(d, _IT_KNOWN)
    obj.text = text
    obj.role = role
    obj.messages = messages
    obj.payment_token = payment_token
    obj.context = context
    obj.__class__ = ev.InputText
    return obj


def _u_input_text(obj: ev.InputText) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "input.text", "text": obj.text}
    value: Any = obj.event_id
    if value is not None:
        out["event_id"] = value
    value = obj.timestamp
    if value is not None:
        out["timestamp"] = value
    value = obj.session_id
    if value is not None:
        out["session_id"] = value
    value = obj.role
    if value is not None:
        out["role"] = value
    value = obj.messages
    if value is not None:
        out["messages"] = [_u_message(m) for m in value]
    value = obj.payment_token
    if value is not None:
        out["payment_token"] = value
    value = obj.context
    if value is not None:
        out["context"] = value
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_RC_KNOWN = _known(ev.ResponseCreate)
_B_RESPONSE_CREATE = _builder(ev.ResponseCreate)


def _s_response_create(d: dict[str, Any], _: Any) -> Any:
    event_id = d.get("event_id")
    timestamp = d.get("timestamp")
    session_id = d.get("session_id")
    response = d.get("response")
    response_format = d.get("response_format")
    if (
        (event_id is not None and type(event_id) is not str)
        or (timestamp is not None and type(timestamp) is not float and type(timestamp) is not int)
        or (session_id is not None and type(session_id) is not str)
    ):
        raise _Decline
    # Per-response overrides are rare: their generic hooks check them.
    if response is not None:
        response = _S_GENERIC[ty.ResponseConfig](response)
    if response_format is not None:
        response_format = _S_GENERIC[ty.ResponseFormat](response_format)
    obj = _B_RESPONSE_CREATE()
    obj.event_id = event_id
    obj.timestamp = timestamp
    obj.session_id = session_id
    obj.unknown = EMPTY if _RC_KNOWN.issuperset(d) else _extra(d, _RC_KNOWN)
    obj.response = response
    obj.response_format = response_format
    obj.__class__ = ev.ResponseCreate
    return obj


def _u_response_create(obj: ev.ResponseCreate) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "response.create"}
    value: Any = obj.event_id
    if value is not None:
        out["event_id"] = value
    value = obj.timestamp
    if value is not None:
        out["timestamp"] = value
    value = obj.session_id
    if value is not None:
        out["session_id"] = value
    value = obj.response
    if value is not None:
        out["response"] = _U_GENERIC[ty.ResponseConfig](value)
    value = obj.response_format
    if value is not None:
        out["response_format"] = _U_GENERIC[ty.ResponseFormat](value)
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_SC_KNOWN = _known(ev.SessionCreate)
_B_SESSION_CREATE = _builder(ev.SessionCreate)


def _s_session_create(d: dict[str, Any], _: Any) -> Any:
    event_id = d.get("event_id")
    timestamp = d.get("timestamp")
    session_id = d.get("session_id")
    version = d["uamp_version"]
    agent = d.get("agent")
    chat = d.get("chat")
    token = d.get("token")
    payment_token = d.get("payment_token")
    capabilities = d.get("client_capabilities")
    if type(version) is not str:
        raise _Decline
    extra = len(d) - 3  # "type", "uamp_version", "session"; see _s_response_delta
    if event_id is not None:
        if type(event_id) is not str:
            raise _Decline
        extra -= 1
    if timestamp is not None:
        if type(timestamp) is not float and type(timestamp) is not int:
            raise _Decline
        extra -= 1
    if session_id is not None:
        if type(session_id) is not str:
            raise _Decline
        extra -= 1
    if agent is not None:
        if type(agent) is not str:
            raise _Decline
        extra -= 1
    if chat is not None:
        if type(chat) is not str:
            raise _Decline
        extra -= 1
    if token is not None:
        if type(token) is not str:
            raise _Decline
        extra -= 1
    if payment_token is not None:
        if type(payment_token) is not str:
            raise _Decline
        extra -= 1
    if capabilities is not None:
        capabilities = _S_GENERIC[ty.Capabilities](capabilities)
        extra -= 1
    session = _s_session_config(d["session"])
    obj = _B_SESSION_CREATE()
    obj.event_id = event_id
    obj.timestamp = timestamp
    obj.session_id = session_id
    obj.unknown = EMPTY if extra == 0 or _SC_KNOWN.issuperset(d) else _extra(d, _SC_KNOWN)
    obj.uamp_version = version
    obj.session = session
    obj.agent = agent
    obj.chat = chat
    obj.token = token
    obj.payment_token = payment_token
    obj.client_capabilities = capabilities
    obj.__class__ = _SessionCreate
    return obj


def _u_session_create(obj: ev.SessionCreate) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "session.create",
        "uamp_version": obj.uamp_version,
        "session": _u_session_config(obj.session),
    }
    value: Any = obj.event_id
    if value is not None:
        out["event_id"] = value
    value = obj.timestamp
    if value is not None:
        out["timestamp"] = value
    value = obj.session_id
    if value is not None:
        out["session_id"] = value
    value = obj.agent
    if value is not None:
        out["agent"] = value
    value = obj.chat
    if value is not None:
        out["chat"] = value
    value = obj.token
    if value is not None:
        out["token"] = value
    value = obj.payment_token
    if value is not None:
        out["payment_token"] = value
    value = obj.client_capabilities
    if value is not None:
        out["client_capabilities"] = _U_GENERIC[ty.Capabilities](value)
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_RDONE_KNOWN = _known(ev.ResponseDone)
_B_RESPONSE_DONE = _builder(ev.ResponseDone)


def _s_response_done(d: dict[str, Any], _: Any) -> Any:
    event_id = d.get("event_id")
    timestamp = d.get("timestamp")
    session_id = d.get("session_id")
    response_id = d.get("response_id")
    signature = d.get("signature")
    if (
        (event_id is not None and type(event_id) is not str)
        or (timestamp is not None and type(timestamp) is not float and type(timestamp) is not int)
        or (session_id is not None and type(session_id) is not str)
        or (response_id is not None and type(response_id) is not str)
        or (signature is not None and type(signature) is not str)
    ):
        raise _Decline
    response = _s_response_output(d["response"])
    obj = _B_RESPONSE_DONE()
    obj.event_id = event_id
    obj.timestamp = timestamp
    obj.session_id = session_id
    obj.unknown = EMPTY if _RDONE_KNOWN.issuperset(d) else _extra(d, _RDONE_KNOWN)
    obj.response = response
    obj.response_id = response_id
    obj.signature = signature
    obj.__class__ = ev.ResponseDone
    return obj


def _u_response_done(obj: ev.ResponseDone) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "response.done", "response": _u_response_output(obj.response)}
    value: Any = obj.event_id
    if value is not None:
        out["event_id"] = value
    value = obj.timestamp
    if value is not None:
        out["timestamp"] = value
    value = obj.session_id
    if value is not None:
        out["session_id"] = value
    value = obj.response_id
    if value is not None:
        out["response_id"] = value
    value = obj.signature
    if value is not None:
        out["signature"] = value
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_TC_KNOWN = _known(ev.ToolCall)
_B_TOOL_CALL = _builder(ev.ToolCall)


def _s_tool_call(d: dict[str, Any], _: Any) -> Any:
    event_id = d.get("event_id")
    timestamp = d.get("timestamp")
    session_id = d.get("session_id")
    call_id = d["call_id"]
    name = d["name"]
    arguments = d["arguments"]
    response_id = d.get("response_id")
    if (
        (event_id is not None and type(event_id) is not str)
        or (timestamp is not None and type(timestamp) is not float and type(timestamp) is not int)
        or (session_id is not None and type(session_id) is not str)
        or type(call_id) is not str
        or type(name) is not str
        or type(arguments) is not str
        or (response_id is not None and type(response_id) is not str)
    ):
        raise _Decline
    obj = _B_TOOL_CALL()
    obj.event_id = event_id
    obj.timestamp = timestamp
    obj.session_id = session_id
    obj.unknown = EMPTY if _TC_KNOWN.issuperset(d) else _extra(d, _TC_KNOWN)
    obj.call_id = call_id
    obj.name = name
    obj.arguments = arguments
    obj.response_id = response_id
    obj.__class__ = ev.ToolCall
    return obj


def _u_tool_call(obj: ev.ToolCall) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "tool.call",
        "call_id": obj.call_id,
        "name": obj.name,
        "arguments": obj.arguments,
    }
    value: Any = obj.event_id
    if value is not None:
        out["event_id"] = value
    value = obj.timestamp
    if value is not None:
        out["timestamp"] = value
    value = obj.session_id
    if value is not None:
        out["session_id"] = value
    value = obj.response_id
    if value is not None:
        out["response_id"] = value
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


_TH_KNOWN = _known(ev.Thinking)
_B_THINKING = _builder(ev.Thinking)


def _s_thinking(d: dict[str, Any], _: Any) -> Any:
    event_id = d.get("event_id")
    timestamp = d.get("timestamp")
    session_id = d.get("session_id")
    content = d["content"]
    stage = d.get("stage")
    redacted = d.get("redacted")
    is_delta = d.get("is_delta")
    response_id = d.get("response_id")
    delta_seq = d.get("delta_seq")
    if (
        (event_id is not None and type(event_id) is not str)
        or (timestamp is not None and type(timestamp) is not float and type(timestamp) is not int)
        or (session_id is not None and type(session_id) is not str)
        or type(content) is not str
        or (stage is not None and type(stage) is not str)
        or (redacted is not None and type(redacted) is not bool)
        or (is_delta is not None and type(is_delta) is not bool)
        or (response_id is not None and type(response_id) is not str)
        or (delta_seq is not None and type(delta_seq) is not int)
    ):
        raise _Decline
    obj = _B_THINKING()
    obj.event_id = event_id
    obj.timestamp = timestamp
    obj.session_id = session_id
    obj.unknown = EMPTY if _TH_KNOWN.issuperset(d) else _extra(d, _TH_KNOWN)
    obj.content = content
    obj.stage = stage
    obj.redacted = redacted
    obj.is_delta = is_delta
    obj.response_id = response_id
    obj.delta_seq = delta_seq
    obj.__class__ = ev.Thinking
    return obj


def _u_thinking(obj: ev.Thinking) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "thinking", "content": obj.content}
    value: Any = obj.event_id
    if value is not None:
        out["event_id"] = value
    value = obj.timestamp
    if value is not None:
        out["timestamp"] = value
    value = obj.session_id
    if value is not None:
        out["session_id"] = value
    value = obj.stage
    if value is not None:
        out["stage"] = value
    value = obj.redacted
    if value is not None:
        out["redacted"] = value
    value = obj.is_delta
    if value is not None:
        out["is_delta"] = value
    value = obj.response_id
    if value is not None:
        out["response_id"] = value
    value = obj.delta_seq
    if value is not None:
        out["delta_seq"] = value
    extra = obj.unknown
    if extra is not EMPTY and extra:
        out.update(extra)
    return out


# --- registration ------------------------------------------------------------------

#: Content item types with a fast structure hook; the rest use the converter's.
_FAST_CONTENT_STRUCTURE: dict[str, _Structure] = {
    "text": _s_text,
    "image": _s_image,
    "tool_call": _s_tool_call_content,
    "thinking": _s_thinking_content,
}
_FAST_CONTENT_UNSTRUCTURE: dict[type[Any], _Unstructure] = {
    ty.TextContent: _u_text,
    ty.ImageContent: _u_image,
    ty.ToolCallContent: _u_tool_call_content,
    ty.ThinkingContent: _u_thinking_content,
}
#: Nested types whose generic hooks the fast hooks call.
_GENERIC_TYPES: tuple[type[Any], ...] = (
    ty.AudioUsage,
    ty.Capabilities,
    ty.ResponseConfig,
    ty.ResponseFormat,
)


def _bind_structure(conv: Converter, cls: type[Any]) -> _Structure:
    hook = conv.get_structure_hook(cls)
    return lambda value: hook(value, cls)


def structure_hooks(conv: Converter) -> dict[str, Callable[[Any, Any], Any]]:
    """The fast structure hooks, by wire type; ``conv`` serves the rest.

    Args:
        conv: The codec's (non-detailed) converter, whose hooks handle the
            nested types that have no fast hook here.

    Returns:
        ``{wire type: hook(obj, cls) -> event}``.
    """
    _S_CONTENT.clear()
    for cls in ty.CONTENT_TYPES:
        _S_CONTENT[cls.type] = _FAST_CONTENT_STRUCTURE.get(cls.type) or _bind_structure(conv, cls)
    for cls in _GENERIC_TYPES:
        _S_GENERIC[cls] = _bind_structure(conv, cls)
    return {
        ev.ResponseDelta.type: _s_response_delta,
        ev.InputText.type: _s_input_text,
        ev.ResponseCreate.type: _s_response_create,
        ev.SessionCreate.type: _s_session_create,
        ev.ResponseDone.type: _s_response_done,
        ev.ToolCall.type: _s_tool_call,
        ev.Thinking.type: _s_thinking,
    }


def unstructure_hooks(conv: Converter) -> dict[type[Any], Callable[[Any], Any]]:
    """The fast unstructure hooks, by event class; ``conv`` serves the rest.

    Returns:
        ``{event class: hook(event) -> dict}``; each dict is fresh, ``"type"``
        first, absent fields omitted, unknown keys last.
    """
    _U_CONTENT.clear()
    for cls in ty.CONTENT_TYPES:
        _U_CONTENT[cls] = _FAST_CONTENT_UNSTRUCTURE.get(cls) or conv.get_unstructure_hook(cls)
    _U_CONTENT[ty.UnknownContent] = lambda obj: obj.raw
    for cls in _GENERIC_TYPES:
        _U_GENERIC[cls] = conv.get_unstructure_hook(cls)
    return {
        ev.ResponseDelta: _u_response_delta,
        ev.InputText: _u_input_text,
        ev.ResponseCreate: _u_response_create,
        ev.SessionCreate: _u_session_create,
        ev.ResponseDone: _u_response_done,
        ev.ToolCall: _u_tool_call,
        ev.Thinking: _u_thinking,
    }
