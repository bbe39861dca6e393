"""JSON bytes and text to typed events and back.

Theory of operation
-------------------
Decoding parses with orjson, picks the event class by the ``type`` key from a
table, and runs that class's structure hook. Two cattrs converters share one
configuration:

* the *fast* converter (``detailed_validation=False``) runs on every input;
  its hooks for the hottest events (``response.delta``, ``input.text``) are
  hand-written;
* the *detailed* converter runs only when the fast path has failed, to turn
  the failure into a :class:`DecodeError` naming the event type and the field
  path (``input.text: field 'text' is required``).

Primitive hooks are strict: a string field takes a string, never a number
coerced to one. Keys a class does not declare are kept in its ``unknown`` bag
and written back on encode, and unknown event, content and delta types are
kept verbatim (UAMP section 14.3).
"""

from __future__ import annotations

import types as _pytypes
import typing
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import orjson
from cattrs import Converter
from cattrs.cols import list_structure_factory
from cattrs.errors import ClassValidationError, IterableValidationError
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.preconf.orjson import make_converter

from . import _fastinit, jsonbounds
from . import events as ev
from . import types as ty
from ._hookgen import (
    INT_MAX,
    INT_MIN,
    INVALID,
    CompiledHooks,
    WrongType,
    is_raw_class,
    json_type_name,
    tag_of,
    wire_keys,
)
from .errors import UampError

__all__ = [
    "DecodeError",
    "decode",
    "decode_object",
    "encode",
    "from_dict",
    "json_text",
    "json_type_name",
    "to_dict",
    "unstructure",
]

_NoneType = type(None)


@attrs.define(auto_exc=True)
class DecodeError(UampError, ValueError):
    """Input that is not a valid UAMP event.

    Attributes:
        message: What is wrong, naming the event type and field path.
        event_type: The ``type`` of the offending event, when one was read.
        event_id: Its ``event_id``, when one could be read, so a reply can
            point at the culprit.
        session_id: Its ``session_id``, when one could be read.
        path: The dotted path of the offending field, or ``""``.
    """

    message: str
    event_type: str | None = attrs.field(default=None, kw_only=True)
    event_id: str | None = attrs.field(default=None, kw_only=True)
    session_id: str | None = attrs.field(default=None, kw_only=True)
    path: str = attrs.field(default="", kw_only=True)


# --- strict primitive hooks --------------------------------------------------


def _s_str(value: Any, _: Any) -> str:
    if type(value) is str:
        return value
    raise WrongType("a string", value)


def _s_int(value: Any, _: Any) -> int:
    # Only integers the encoder can write back (64-bit; see _hookgen.INT_MAX).
    if type(value) is int and INT_MIN <= value <= INT_MAX:
        return value
    if type(value) is float and value.is_integer() and INT_MIN <= value <= INT_MAX:
        return int(value)
    raise WrongType("an integer", value)


def _s_float(value: Any, _: Any) -> float:
    if type(value) is float or type(value) is int:
        return value
    raise WrongType("a number", value)


def _s_bool(value: Any, _: Any) -> bool:
    if type(value) is bool:
        return value
    raise WrongType("a boolean", value)


def _s_object(value: Any, _: Any) -> dict[str, Any]:
    if type(value) is dict:
        return value
    raise WrongType("an object", value)


def _s_any(value: Any, _: Any) -> Any:
    return value


# --- tagged unions -----------------------------------------------------------

_CONTENT_BY_TAG: dict[str, type[Any]] = {cls.type: cls for cls in ty.CONTENT_TYPES}
_DELTA_BY_TAG: dict[str, type[Any]] = {cls.type: cls for cls in ty.DELTA_TYPES}
_CONTENT_SET = frozenset(ty.CONTENT_TYPES) | {ty.UnknownContent}
_DELTA_SET = frozenset(ty.DELTA_TYPES) | {ty.DeltaUnknown}


def _tagged_union_hook(
    conv: Converter, by_tag: Mapping[str, type[Any]], unknown_cls: type[Any]
) -> Callable[[Any, Any], Any]:
    hooks = {tag: conv.get_structure_hook(cls) for tag, cls in by_tag.items()}
    classes = dict(by_tag)

    def structure(value: Any, _: Any) -> Any:
        if type(value) is not dict:
            raise WrongType("an object", value)
        tag = value.get("type")
        if tag is None:
            raise KeyError("type")
        hook = hooks.get(tag)
        if hook is None:
            if type(tag) is not str:
                raise WrongType("a string", tag)
            return unknown_cls(raw=value)
        return hook(value, classes[tag])

    return structure


def _media_hook(conv: Converter) -> Callable[[Any, Any], Any]:
    url_hook = conv.get_structure_hook(ty.MediaURL)

    def structure(value: Any, _: Any) -> Any:
        if type(value) is str:
            return value
        if type(value) is dict:
            return url_hook(value, ty.MediaURL)
        raise WrongType("a string or an object with 'url'", value)

    return structure


def _union_structure_factory(conv: Converter) -> Callable[[Any], Callable[[Any, Any], Any]]:
    def factory(union: Any) -> Callable[[Any, Any], Any]:
        members = typing.get_args(union)
        rest = tuple(m for m in members if m is not _NoneType)
        nullable = len(rest) != len(members)
        inner: Callable[[Any, Any], Any]
        if len(rest) == 1:
            inner = conv.get_structure_hook(rest[0])
            target = rest[0]
        elif set(rest) == {str, ty.MediaURL}:
            inner, target = _media_hook(conv), union
        elif set(rest) <= _CONTENT_SET:
            inner = _tagged_union_hook(conv, _CONTENT_BY_TAG, ty.UnknownContent)
            target = union
        elif set(rest) <= _DELTA_SET:
            inner = _tagged_union_hook(conv, _DELTA_BY_TAG, ty.DeltaUnknown)
            target = union
        else:  # pragma: no cover - a type this module does not declare
            raise TypeError(f"no structure hook for {union!r}")
        if not nullable:
            return inner

        def optional(value: Any, _: Any) -> Any:
            return None if value is None else inner(value, target)

        return optional

    return factory


def _list_structure_factory(conv: Converter) -> Callable[[Any], Callable[[Any, Any], Any]]:
    """Lists take JSON arrays only: cattrs' own hook takes any iterable, so
    ``"modalities": "text"`` would become ``["t", "e", "x", "t"]``."""

    def factory(t: Any) -> Callable[[Any, Any], Any]:
        inner = list_structure_factory(t, conv)

        def structure(value: Any, _: Any) -> Any:
            if type(value) is not list:
                raise WrongType("an array", value)
            return inner(value, t)

        return structure

    return factory


def _is_list(t: Any) -> bool:
    return t is list or typing.get_origin(t) is list


def _is_union(t: Any) -> bool:
    return typing.get_origin(t) in (typing.Union, _pytypes.UnionType)


# --- attrs classes: keep unknown keys, omit absent fields -------------------


def _same(value: Any) -> Any:
    return value


def _class_structure_factory(conv: Converter, detailed: bool) -> Callable[[Any], Any]:
    def factory(cls: type[Any]) -> Callable[[Any, Any], Any]:
        names = {f.name for f in attrs.fields(cls)}
        if is_raw_class(cls):
            return lambda value, _: cls(raw=value)
        overrides: dict[str, Any] = {}
        if "unknown" in names:
            overrides["unknown"] = override(omit=True)
        generated = make_dict_structure_fn(
            cls,
            conv,
            _cattrs_forbid_extra_keys=False,
            _cattrs_detailed_validation=detailed,
            **overrides,
        )
        if "unknown" not in names:
            return generated
        known = wire_keys(cls)
        setter = object.__setattr__
        adapt = _ADAPTERS.get(cls, _same)

        def structure(value: Any, _: Any) -> Any:
            if type(value) is not dict:
                raise WrongType("an object", value)
            value = adapt(value)
            obj = generated(value, cls)
            if not known.issuperset(value):
                setter(obj, "unknown", {k: v for k, v in value.items() if k not in known})
            return obj

        return structure

    return factory


def _flat_tool_call(value: Any) -> Any:
    """OpenAI's nested tool call ``{"id", "type": "function", "function":
    {"name", "arguments"}}`` as UAMP's flat one (a missing ``arguments`` is
    ``""``); a ``"type"`` key is not kept. Both paths read a tool call
    through this."""
    if type(value) is not dict:
        return value
    function = value.get("function")
    if "name" not in value and type(function) is dict:
        return {
            "id": value.get("id"),
            "name": function.get("name"),
            "arguments": function.get("arguments", ""),
        }
    if "type" in value:
        return {k: v for k, v in value.items() if k != "type"}
    return value


#: Input adapters, per class, that both paths apply before reading an object.
_ADAPTERS: Mapping[type[Any], Callable[[Any], Any]] = {ty.ToolInvocation: _flat_tool_call}


def _class_unstructure_factory(conv: Converter) -> Callable[[Any], Any]:
    def factory(cls: type[Any]) -> Callable[[Any], Any]:
        if is_raw_class(cls):
            return lambda obj: obj.raw
        overrides: dict[str, Any] = {}
        for f in attrs.fields(cls):
            if f.name == "unknown":
                overrides["unknown"] = override(omit=True)
            elif f.default is not None:
                # Only absent (None) values are omitted; a field whose default
                # is a real value (ToolDefinition.type) is always written.
                overrides[f.name] = override(omit_if_default=False)
        generated = make_dict_unstructure_fn(cls, conv, _cattrs_omit_if_default=True, **overrides)
        tag = tag_of(cls)

        def unstructure(obj: Any) -> dict[str, Any]:
            out: dict[str, Any] = {"type": tag} if tag is not None else {}
            out.update(generated(obj))
            if obj.unknown:
                out.update(obj.unknown)
            return out

        return unstructure

    return factory


def _union_unstructure_factory(conv: Converter) -> Callable[[Any], Any]:
    def factory(union: Any) -> Callable[[Any], Any]:
        cache: dict[type[Any], Callable[[Any], Any]] = {}

        def unstructure(obj: Any) -> Any:
            if obj is None or type(obj) is str:
                return obj
            cls = type(obj)
            hook = cache.get(cls)
            if hook is None:
                hook = cache[cls] = conv.get_unstructure_hook(cls)
            return hook(obj)

        return unstructure

    return factory


def _make(detailed: bool) -> Converter:
    conv = make_converter(detailed_validation=detailed, forbid_extra_keys=False)
    conv.register_structure_hook(str, _s_str)
    conv.register_structure_hook(int, _s_int)
    conv.register_structure_hook(float, _s_float)
    conv.register_structure_hook(bool, _s_bool)
    conv.register_structure_hook_func(lambda t: t == dict[str, Any], _s_object)
    conv.register_structure_hook_func(lambda t: t is Any, _s_any)
    conv.register_structure_hook_factory(attrs.has, _class_structure_factory(conv, detailed))
    conv.register_structure_hook_factory(_is_union, _union_structure_factory(conv))
    conv.register_structure_hook_factory(_is_list, _list_structure_factory(conv))
    conv.register_unstructure_hook_factory(attrs.has, _class_unstructure_factory(conv))
    conv.register_unstructure_hook_factory(_is_union, _union_unstructure_factory(conv))
    conv.register_unstructure_hook_func(lambda t: t == dict[str, Any], lambda d: d)
    return conv


#: The generic path: cattrs hooks, the reference the compiled ones are tested
#: against, and the server of any class the generator refuses.
converter: Converter = _make(detailed=False)
#: Re-runs refused input to name the offending field in the error.
_detailed: Converter = _make(detailed=True)


def _generic_structure(cls: type[Any]) -> Callable[[Any], Any]:
    hook = converter.get_structure_hook(cls)
    return lambda value: hook(value, cls)


class _Codec:
    """The compiled hooks and the event tables ``decode``/``encode`` use."""

    __slots__ = ("by_class", "by_tag", "hooks")

    def __init__(self) -> None:
        self.hooks = CompiledHooks(
            adapters=_ADAPTERS,
            fallback_structure=_generic_structure,
            fallback_unstructure=converter.get_unstructure_hook,
        )
        self.hooks.compile(*ev.EVENT_TYPES.values())
        #: Wire type -> structure function of its event class.
        self.by_tag = {tag: self.hooks.structure_fn(cls) for tag, cls in ev.EVENT_TYPES.items()}
        create = self.by_tag["session.create"]
        self.by_tag["session.create"] = lambda obj: create(liberal_create(obj))
        #: Event class -> unstructure function; other classes are added on use.
        self.by_class = self.hooks.unstructure_table()
        for cls in (*ev.EVENT_TYPES.values(), ev.UnknownEvent):
            self.by_class[cls] = self.hooks.unstructure_fn(cls)


#: The version a ``session.create`` without ``uamp_version`` is taken to speak (14.1).
DEFAULT_UAMP_VERSION: Final = "1.0"


def liberal_create(obj: dict[str, Any]) -> dict[str, Any]:
    """Every form of ``session.create`` the specs show, in the form of section 5.1.

    * Section 5.1: the configuration in ``session``, ``agent`` and ``token``
      at the top level (section 10.4 shows the same).
    * Spec 004's multiplexed form, ``{"session": {"agent": A, "token": T}}``:
      the agent and the token move to the top level (a top-level value wins).
    * Clients that leave things out: no ``session`` or no
      ``session.modalities`` is a text session (``["text"]``), no
      ``uamp_version`` is :data:`DEFAULT_UAMP_VERSION`.

    Anything present but malformed is left as it came, so the decoder's
    refusal names the field and what is wrong with it.
    """
    session = obj.get("session")
    if (
        type(session) is dict
        and "modalities" in session
        and "agent" not in session
        and "token" not in session
        and "uamp_version" in obj
    ):
        return obj  # the form of section 5.1, as most clients send it
    out = dict(obj)
    out.setdefault("uamp_version", DEFAULT_UAMP_VERSION)
    if session is None:
        session = {}
    elif type(session) is not dict:
        return out
    session = dict(session)
    for key in ("agent", "token"):
        if key in session:
            value = session.pop(key)
            out.setdefault(key, value)
    session.setdefault("modalities", ["text"])
    out["session"] = session
    return out


_CODEC = _Codec()


# --- the client's usual two events ---------------------------------------------
#
# A client's ``input.text`` and ``response.create`` mostly arrive in one
# shape: the type, the session's id, and the text. Their structure functions
# first take that shape themselves -- exactly these keys, strings where
# strings go -- and build the event positionally; anything else (another
# key, a missing one, a value of another type) goes to the compiled function
# as before, which decides and words every refusal. The result is the same
# event either way (tests/proto/test_hot_shapes.py).

_make_text_input = _fastinit.maker(ev.InputText, ("session_id", "text"))
_make_text_input_alone = _fastinit.maker(ev.InputText, ("text",))
_make_create = _fastinit.maker(ev.ResponseCreate, ("session_id",))
_make_create_alone = _fastinit.maker(ev.ResponseCreate, ())


def _hot_input_text(general: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def structure(d: dict[str, Any]) -> Any:
        size = len(d)
        if size == 3:
            sid, text = d.get("session_id"), d.get("text")
            if type(sid) is str and type(text) is str:
                return _make_text_input(sid, text)
        elif size == 2:
            text = d.get("text")
            if type(text) is str:
                return _make_text_input_alone(text)
        return general(d)

    return structure


def _hot_response_create(general: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def structure(d: dict[str, Any]) -> Any:
        size = len(d)
        if size == 2:
            sid = d.get("session_id")
            if type(sid) is str:
                return _make_create(sid)
        elif size == 1:
            return _make_create_alone()
        return general(d)

    return structure


#: The compiled structure functions of the two, which the hot ones fall back to.
GENERAL_STRUCTURE: Final = {
    "input.text": _CODEC.by_tag["input.text"],
    "response.create": _CODEC.by_tag["response.create"],
}
_CODEC.by_tag["input.text"] = _hot_input_text(GENERAL_STRUCTURE["input.text"])
_CODEC.by_tag["response.create"] = _hot_response_create(GENERAL_STRUCTURE["response.create"])

#: The codec's two tables, as module globals for the hot paths.
_BY_TAG = _CODEC.by_tag
#: ``response.delta`` 's structure function (``_BY_TAG["response.delta"]``), which
#: :func:`decode` reaches without the table.
_DELTA_HOOK: Final = _BY_TAG["response.delta"]
#: A plain dict, which the interpreter indexes faster than the self-filling
#: ``_CODEC.by_class`` (a dict subclass); a miss goes there (:func:`_unstructure_fn`).
_BY_CLASS: dict[type[Any], Callable[[Any], Any]] = dict(_CODEC.by_class)


def _unstructure_fn(cls: type[Any]) -> Callable[[Any], Any]:
    """The unstructure function of a class ``_BY_CLASS`` does not hold yet."""
    hook = _BY_CLASS[cls] = _CODEC.by_class[cls]
    return hook


# --- errors ------------------------------------------------------------------


#: What the detailed converter raises on input it refuses.
_DESCRIBED: tuple[type[BaseException], ...] = (
    ClassValidationError,
    IterableValidationError,
    *INVALID,
)


def _leaf_errors(exc: BaseException, path: str) -> list[tuple[str, BaseException]]:
    if isinstance(exc, ClassValidationError | IterableValidationError):
        out: list[tuple[str, BaseException]] = []
        for sub in exc.exceptions:
            step = ""
            for note in getattr(sub, "__notes__", ()):
                name = getattr(note, "name", None)
                index = getattr(note, "index", None)
                if name is not None:
                    step = f"{path}.{name}" if path else str(name)
                elif index is not None:
                    step = f"{path}[{index}]"
            out.extend(_leaf_errors(sub, step or path))
        return out
    return [(path, exc)]


def _describe(path: str, exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        missing = exc.args[0] if exc.args else path
        if path and not path.endswith(str(missing)):
            path = f"{path}.{missing}"
        return f"field '{path or missing}' is required"
    if isinstance(exc, WrongType):
        return f"field '{path}' {exc}"
    return f"field '{path}': {exc}" if path else str(exc)


def _error_for(tag: str, cls: type[Any], obj: dict[str, Any]) -> DecodeError:
    event_id = obj.get("event_id")
    session_id = obj.get("session_id")
    message = f"{tag}: invalid event"
    path = ""
    try:
        _detailed.structure(obj, cls)
    except _DESCRIBED as exc:
        leaves = _leaf_errors(exc, "") or [("", exc)]
        first_path, first = leaves[0]
        message = f"{tag}: " + "; ".join(_describe(p, e) for p, e in leaves)
        path = _full_path(first_path, first)
    # (Had the detailed converter accepted what the generic one refused, the
    # generic message above stands rather than an invented field.)
    return DecodeError(
        message,
        event_type=tag,
        event_id=event_id if isinstance(event_id, str) else None,
        session_id=session_id if isinstance(session_id, str) else None,
        path=path,
    )


def _full_path(path: str, exc: BaseException) -> str:
    if isinstance(exc, KeyError) and exc.args:
        name = str(exc.args[0])
        if not path.endswith(name):
            return f"{path}.{name}" if path else name
    return path


# --- public API --------------------------------------------------------------


def _refused(tag: str, obj: dict[str, Any]) -> DecodeError:
    if tag == "session.create":
        obj = liberal_create(obj)  # describe what was decoded, defaults filled in
    return _error_for(tag, ev.EVENT_TYPES[tag], obj)


def decode_object(obj: Any) -> ev.Event | ev.UnknownEvent:
    """Turn an already-parsed JSON value into a typed event.

    Args:
        obj: One event as parsed JSON (a dict).

    Returns:
        The typed event, or :class:`~uamp_proto.events.UnknownEvent` for a
        type this version does not know.

    Raises:
        DecodeError: ``obj`` is not an object, has no string ``type``, or
            does not match its event's schema.
    """
    if type(obj) is not dict:
        raise DecodeError(f"an event must be a JSON object, got {json_type_name(obj)}")
    tag = obj.get("type")
    if type(tag) is not str:
        event_id = obj.get("event_id")
        if tag is None:
            problem = "an event must have a 'type' field"
        else:
            problem = f"an event's 'type' must be a string, got {json_type_name(tag)}"
        raise DecodeError(problem, event_id=event_id if isinstance(event_id, str) else None)
    hook = _CODEC.by_tag.get(tag)
    if hook is None:
        # Unknown event types are kept, never an error (section 14.3).
        return ev.UnknownEvent(type=tag, raw=obj)
    try:
        return hook(obj)  # type: ignore[no-any-return]
    except INVALID:
        raise _refused(tag, obj) from None


_loads = orjson.loads
_check_bounds = jsonbounds.check
_FLOOR = jsonbounds.FLOOR
_TooManyValues = jsonbounds.TooManyValues
_dumps = orjson.dumps
_JSONDecodeError = orjson.JSONDecodeError


def decode(data: bytes | bytearray | memoryview | str) -> ev.Event | ev.UnknownEvent:
    """Parse one JSON-encoded UAMP event.

    Args:
        data: One event as UTF-8 bytes or text.

    Returns:
        The typed event, or :class:`~uamp_proto.events.UnknownEvent` for a
        type this version does not know.

    Raises:
        DecodeError: Invalid JSON, more values than
            :mod:`~uamp_proto.jsonbounds` lets be parsed, a non-object, a
            missing ``type``, a missing required field or a field of the
            wrong type.
    """
    try:
        if len(data) > _FLOOR[0]:  # else within every limit: not even the call
            _check_bounds(data)
        obj = _loads(data)
    except _TooManyValues as exc:
        raise DecodeError(str(exc)) from None
    except _JSONDecodeError as exc:
        raise DecodeError(f"invalid JSON: {exc}") from None
    # The hot path of decode_object, inlined: not an object (TypeError), no
    # type or an unknown one (KeyError), an unhashable type (TypeError) go
    # to decode_object, which sorts them out.
    try:
        tag = obj["type"]
        # The stream's own event first, by comparison: orjson hands the tag
        # over as a fresh string, which the table would hash first.
        hook = _DELTA_HOOK if tag == "response.delta" else _BY_TAG[tag]
    except (KeyError, TypeError):
        return decode_object(obj)
    try:
        return hook(obj)  # type: ignore[no-any-return]
    except INVALID:
        raise _refused(tag, obj) from None


def to_dict(event: ev.Event | ev.UnknownEvent) -> dict[str, Any]:
    """The JSON-ready dict of an event: ``type`` first, absent fields omitted,
    unknown keys written back."""
    try:
        hook = _BY_CLASS[type(event)]
    except KeyError:
        hook = _unstructure_fn(type(event))
    return hook(event)  # type: ignore[no-any-return]


def encode(event: ev.Event | ev.UnknownEvent) -> bytes:
    """Serialise one event to compact UTF-8 JSON bytes.

    Args:
        event: Any event, :class:`~uamp_proto.events.UnknownEvent` included.

    Returns:
        The event's JSON: ``type`` first, absent fields omitted, unknown keys
        written back.
    """
    try:
        hook = _BY_CLASS[type(event)]
    except KeyError:
        hook = _unstructure_fn(type(event))
    return _dumps(hook(event))


def from_dict(cls: type[Any], value: Any) -> Any:
    """Structure a plain JSON value into one of the protocol's types.

    Raises:
        DecodeError: the value does not match ``cls``.
    """
    if type(value) is dict:
        tag = tag_of(cls) if attrs.has(cls) else None
        if tag is not None and "type" not in value:
            value = {"type": tag, **value}  # the compiled function reads it
        try:
            return _CODEC.hooks.structure_fn(cls)(value)
        except INVALID:
            pass
    raise _value_error(cls, value)


def _value_error(cls: type[Any], value: Any) -> DecodeError:
    """The error for a value ``cls`` refuses, naming the fields."""
    try:
        _detailed.structure(value, cls)
    except _DESCRIBED as exc:
        leaves = _leaf_errors(exc, "")
        text = "; ".join(_describe(p, e) for p, e in leaves)
        return DecodeError(f"{cls.__name__}: {text}")
    return DecodeError(f"{cls.__name__}: invalid value")  # pragma: no cover


def unstructure(value: Any) -> Any:
    """The JSON-ready form of any protocol type (content item, message, ...)."""
    if attrs.has(type(value)):
        return _CODEC.by_class[type(value)](value)
    return converter.unstructure(value)


# --- a server's usual events, as bytes ----------------------------------------
#
# What ``Connection.send`` writes for the two events on every response's way
# to its first delta, ``response.created`` and a text ``response.delta``,
# when the event carries nothing but what the server gives it (the agent's
# delta, both ids passed to ``send``, the connection's event id): the same
# bytes as ``orjson.dumps`` of ``to_dict`` with the ids added in the order
# ``send`` adds them, put together from fixed parts and the JSON of each
# string (tests/proto/test_event_bytes.py holds the two to each other).

#: Up to a text delta's text: ``{"type":"response.delta","delta":{"type":"text","text":``.
TEXT_DELTA_HEAD: Final = b'{"type":"response.delta","delta":{"type":"text","text":'
#: Up to ``response.created`` 's ``response_id``.
CREATED_HEAD: Final = b'{"type":"response.created","response_id":'
#: Between ``response.created`` 's ``response_id`` and its ``session_id``.
CREATED_SESSION: Final = b',"session_id":'
#: Between either event's last id and its event id's text.
EVENT_ID_KEY: Final = b',"event_id":"'
#: After the event id's text.
EVENT_END: Final = b'"}'
#: Between a text delta's text and its ``session_id``.
TEXT_DELTA_SESSION: Final = b'},"session_id":'
#: Between a text delta's ``session_id`` and its ``response_id``.
TEXT_DELTA_RESPONSE: Final = b',"response_id":'


def text_delta_tail(session_id: str, response_id: str) -> bytes:
    """What follows a text delta's text up to its event id's text (one per response)."""
    return b"".join(
        (
            TEXT_DELTA_SESSION,
            _dumps(session_id),
            TEXT_DELTA_RESPONSE,
            _dumps(response_id),
            EVENT_ID_KEY,
        )
    )


def json_text(value: str) -> bool:
    """Whether JSON writes ``value`` as it is, between quotes (nothing to escape)."""
    try:
        return _dumps(value) == b'"' + value.encode() + b'"'
    except (orjson.JSONEncodeError, UnicodeEncodeError):  # a lone surrogate
        return False
