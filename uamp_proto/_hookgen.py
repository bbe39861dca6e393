"""Structure and unstructure functions compiled from attrs field metadata.

Theory of operation
-------------------
For every attrs class the codec meets, :class:`CompiledHooks` writes the
source of two plain Python functions from the class's fields and their type
hints, and compiles them with ``exec`` into a namespace that belongs to that
``CompiledHooks`` object (no module-level table is ever filled in):

* ``structure(d) -> instance`` takes an already-parsed JSON object (the caller
  has checked it is a ``dict``). It reads each declared key, checks its JSON
  type strictly and inline (``type(v) is str``: ``True`` never passes for a
  number), allocates a private mutable twin of the frozen class (see
  :func:`_builder`), fills every field with plain attribute stores and then
  gives the instance its real class by assigning ``__class__``: the frozen
  attrs ``__init__`` would store each slot through ``object.__setattr__``,
  three times the cost.
  Keys the class does not declare go to its ``unknown`` bag; to skip that
  scan in the usual case the function counts the declared keys it found
  (an optional key held as null is read by one ``d.get`` and not counted:
  the scan then finds nothing and the bag stays empty). The same count
  spares the lookups of absent keys: required keys are read first, then the
  optional ones, and once every key of the object is accounted for the
  remaining optional fields are absent without looking (the keys most
  events arrive with, :data:`_READ_FIRST`, come first, those most arrive
  without, :data:`_READ_LAST`, last). Which key is read
  first changes no outcome: a refusal is described afresh by the codec's
  detailed converter.
* ``unstructure(instance) -> dict`` writes ``"type"`` first (for a class
  tagged by a ``type`` class variable), then the fields that are always
  written, then the optional fields that are set, both in declaration order,
  then the unknown keys: the key order cattrs' generated hooks produce.

Invalid input raises one of :data:`INVALID`: ``KeyError`` for a missing
required key, :class:`WrongType` for a value of the wrong JSON type, and
``RecursionError`` for input nested deeper than the interpreter allows. The
functions decide validity exactly as the generic cattrs converter of
:mod:`uamp_proto.codec` does; the codec's tests check both agree.

The field types understood are listed in :func:`CompiledHooks._value`:
``str``, ``int``, ``float``, ``bool``, ``Any``, ``dict[str, Any]``,
``list[T]``, ``T | None``, attrs classes, a string-or-object union (media)
and a union of classes tagged by ``type`` plus one class keeping unknown
tags raw. A class with a field of any other type, or with attrs validators,
converters or a post-init hook, is refused at generation time with
:class:`Unsupported` naming the reason; the codec then serves that class with
its generic hook and lists it (``CompiledHooks.unsupported``).
"""

from __future__ import annotations

import functools
import types as _pytypes
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from .errors import UampError

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "INVALID",
    "CompiledHooks",
    "Unsupported",
    "WrongType",
    "json_type_name",
]

_NoneType = type(None)

#: The integers the codec accepts: what orjson can write back (signed and
#: unsigned 64-bit). A larger one arrives from orjson as a float.
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
_Hook = Callable[[Any], Any]


def json_type_name(value: object) -> str:
    """The JSON type of a parsed value, as error messages name it (``"array"``...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class WrongType(UampError, TypeError):
    """A JSON value of the wrong type for its field."""

    def __init__(self, expected: str, value: object) -> None:
        super().__init__(f"must be {expected}, got {json_type_name(value)}")


class Unsupported(UampError, TypeError):
    """A class the generator does not compile; the reason is the message."""


#: What invalid input raises from a compiled structure function.
INVALID: tuple[type[BaseException], ...] = (KeyError, WrongType, RecursionError)

#: Strict checks of the primitive JSON types: (condition for "wrong", label).
_PRIMITIVE: dict[Any, tuple[str, str]] = {
    str: ("type({v}) is not str", "a string"),
    bool: ("type({v}) is not bool", "a boolean"),
    float: ("type({v}) is not float and type({v}) is not int", "a number"),
    dict[str, Any]: ("type({v}) is not dict", "an object"),
}


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, _pytypes.UnionType)


def _without_none(tp: Any) -> Any:
    """``tp`` less its ``None`` member (``str | None`` -> ``str``)."""
    if not _is_union(tp):
        return tp
    rest = tuple(m for m in typing.get_args(tp) if m is not _NoneType)
    return rest[0] if len(rest) == 1 else typing.Union[rest]  # noqa: UP007


def tag_of(cls: type[Any]) -> str | None:
    """The wire tag a class carries as its ``type`` class variable, if any."""
    if "type" in attrs.fields_dict(cls):
        return None
    tag = getattr(cls, "type", None)
    return tag if isinstance(tag, str) else None


def wire_keys(cls: type[Any]) -> frozenset[str]:
    """The keys ``cls`` declares on the wire: its fields, and its tag key."""
    keys = {f.name for f in attrs.fields(cls) if f.name != "unknown"}
    if tag_of(cls) is not None:
        keys.add("type")
    return frozenset(keys)


def is_raw_class(cls: type[Any]) -> bool:
    """A class that keeps a whole object verbatim (unknown tags, 14.3)."""
    names = attrs.fields_dict(cls)
    return "raw" in names and "unknown" not in names


def _slot_setter(cls: type[Any], name: str) -> Any:
    for klass in cls.__mro__:
        descriptor = klass.__dict__.get(name)
        if type(descriptor) is _pytypes.MemberDescriptorType:
            return descriptor.__set__
    raise Unsupported(f"{cls.__name__}.{name} is not a slot")


def _builder(cls: type[Any]) -> type[Any]:
    """A private subclass of frozen ``cls`` whose instances take plain attribute stores.

    It adds no slot, so once every field is stored the instance becomes a true
    ``cls`` by assigning its ``__class__`` (CPython allows that between classes
    of one layout). ``object``'s ``__setattr__`` and ``__delattr__`` (one
    type slot between them: both must be put back) give the builder the
    generic setter, which the interpreter specialises into a direct slot
    store; ``object.__init__`` lets ``builder()`` allocate through the type
    call. Three times cheaper than storing through each slot's descriptor,
    which is what the frozen ``__init__`` does. Each :class:`CompiledHooks`
    makes its own builders; instances of a builder never leave the
    generated function.
    """
    namespace = {
        "__slots__": (),
        "__init__": object.__init__,
        "__setattr__": object.__setattr__,
        "__delattr__": object.__delattr__,
        "__module__": __name__,
    }
    return type(f"_{cls.__name__}Builder", (cls,), namespace)


#: Optional keys that events mostly arrive with (uamp's server names the
#: session on every event it writes, clients on a multiplexed connection):
#: read first, so the count of keys present reaches zero early.
_READ_FIRST = ("event_id", "session_id")
#: Optional keys that events mostly arrive without (the server sets no
#: ``timestamp``): read last, so that once the keys present are counted they
#: are not looked up.
_READ_LAST = ("timestamp",)


def _read_rank(name: str) -> int:
    if name in _READ_FIRST:
        return _READ_FIRST.index(name) - len(_READ_FIRST)
    return 1 if name in _READ_LAST else 0


def _read_order(fields: list[Any]) -> list[Any]:
    """The optional fields in the order a structure function reads them."""
    return sorted(fields, key=lambda f: _read_rank(f.name))


def _classes_in(tp: Any) -> list[type[Any]]:
    """The attrs classes a field type mentions."""
    if attrs.has(tp):
        return [tp]
    return [c for arg in typing.get_args(tp) for c in _classes_in(arg)]


class _ByType(dict[type[Any], _Hook]):
    """Unstructure functions by exact class; a class met for the first time
    (a subclass, a raw class) gets its own from the owning hooks."""

    def __init__(self, owner: CompiledHooks) -> None:
        super().__init__()
        self._owner = owner

    def __missing__(self, cls: type[Any]) -> _Hook:
        hook = self[cls] = self._owner.unstructure_fn(cls)
        return hook


class CompiledHooks:
    """Per-class structure and unstructure functions, compiled on first use.

    Args:
        adapters: Per class, a function applied to the input object before it
            is read (``ToolInvocation`` accepts OpenAI's nested form).
        fallback_structure: The generic structure hook of a class the
            generator refuses, as ``hook(value)``.
        fallback_unstructure: Likewise for unstructuring.
    """

    def __init__(
        self,
        *,
        adapters: Mapping[type[Any], _Hook],
        fallback_structure: Callable[[type[Any]], _Hook],
        fallback_unstructure: Callable[[type[Any]], _Hook],
    ) -> None:
        self._adapters = dict(adapters)
        self._fallback_structure = fallback_structure
        self._fallback_unstructure = fallback_unstructure
        self._structure: dict[type[Any], _Hook] = {}
        self._unstructure: dict[type[Any], _Hook] = {}
        #: Classes served by their generic hooks, with the reason.
        self.unsupported: dict[type[Any], str] = {}
        self._ns: dict[str, Any] = {"WrongType": WrongType, "int_": int}
        self._names: dict[Any, str] = {}
        self._tables: list[tuple[dict[str, _Hook], dict[str, str]]] = []
        #: Resolved type hints by class (resolving them is most of the work
        #: of generating: each class is asked for them three or four times).
        self._hints: dict[type[Any], dict[str, Any]] = {}

    # --- public -----------------------------------------------------------

    def structure_fn(self, cls: type[Any]) -> _Hook:
        """The function turning a JSON object (a ``dict``) into ``cls``.

        For a class tagged by ``type`` the object must hold the ``type`` key.
        """
        hook = self._structure.get(cls)
        if hook is None:
            self.compile(cls)
            hook = self._structure[cls]
        return hook

    def unstructure_fn(self, cls: type[Any]) -> _Hook:
        """The function turning an instance of ``cls`` into a fresh ``dict``."""
        hook = self._unstructure.get(cls)
        if hook is None:
            self.compile(cls)
            hook = self._unstructure[cls]
        return hook

    def unstructure_table(self) -> dict[type[Any], _Hook]:
        """A table of unstructure functions by exact class that fills itself
        on a miss (a subclass, a class not compiled yet)."""
        return _ByType(self)

    def compile(self, *roots: type[Any]) -> None:
        """Compile ``roots`` and every class reachable through their fields."""
        todo = [c for c in self._reachable(roots) if c not in self._structure]
        sources: list[str] = []
        for cls in todo:
            if is_raw_class(cls):
                self._bind(cls, functools.partial(_keep_raw, cls), _raw)
                continue
            try:
                sources.append(self._structure_source(cls) + self._unstructure_source(cls))
            except Unsupported as exc:
                self.unsupported[cls] = str(exc)
                self._bind(cls, self._fallback_structure(cls), self._fallback_unstructure(cls))
        if sources:
            exec(compile("\n".join(sources), "<uamp compiled hooks>", "exec"), self._ns)
        for cls in todo:
            if cls not in self._structure:
                self._bind(cls, self._ns[self._fn("s", cls)], self._ns[self._fn("u", cls)])
        for table, names in self._tables:
            table.update({tag: self._ns[name] for tag, name in names.items()})
        self._tables.clear()

    # --- generation -------------------------------------------------------

    def _bind(self, cls: type[Any], structure: _Hook, unstructure: _Hook) -> None:
        self._structure[cls] = structure
        self._unstructure[cls] = unstructure
        self._ns[self._fn("s", cls)] = structure
        self._ns[self._fn("u", cls)] = unstructure

    def _reachable(self, roots: tuple[type[Any], ...]) -> list[type[Any]]:
        seen: dict[type[Any], None] = {}
        stack = list(roots)
        while stack:
            cls = stack.pop()
            if cls in seen or not attrs.has(cls):
                continue
            seen[cls] = None
            try:
                hints = self._type_hints(cls)
            except (NameError, TypeError):  # unresolvable hints: refused later
                continue
            for f in attrs.fields(cls):
                stack.extend(_classes_in(hints.get(f.name)))
        return list(seen)

    def _fn(self, prefix: str, cls: type[Any]) -> str:
        """The namespace name of ``cls``'s structure (``s``) or unstructure
        (``u``) function."""
        return self._const(("fn", prefix, cls), f"{prefix}_{cls.__name__}_", None)

    def _const(self, key: Any, prefix: str, value: Any) -> str:
        """A namespace name for ``value``, one per ``key``."""
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = f"{prefix}{len(self._names)}"
            if value is not None:
                self._ns[name] = value
        return name

    def _builder_name(self, cls: type[Any]) -> str:
        """The namespace name of ``cls``'s builder (made once per hooks object)."""
        key = ("builder", cls)
        name = self._names.get(key)
        return name if name is not None else self._const(key, "builder", _builder(cls))

    def _type_hints(self, cls: type[Any]) -> dict[str, Any]:
        """``typing.get_type_hints(cls)``, resolved once per class."""
        hints = self._hints.get(cls)
        if hints is None:
            hints = self._hints[cls] = typing.get_type_hints(cls)
        return hints

    def _refuse(self, cls: type[Any]) -> dict[str, Any]:
        """Raise :class:`Unsupported` if ``cls`` is outside the generator's
        rules; otherwise return its resolved type hints."""
        if not hasattr(cls, "__slots__"):
            raise Unsupported(f"{cls.__name__} is not slotted")
        if hasattr(cls, "__attrs_post_init__"):
            raise Unsupported(f"{cls.__name__} has a post-init hook")
        if "unknown" not in attrs.fields_dict(cls):
            raise Unsupported(f"{cls.__name__} has no unknown bag")
        for f in attrs.fields(cls):
            if f.validator is not None or f.converter is not None:
                raise Unsupported(f"{cls.__name__}.{f.name} has a validator or converter")
        try:
            return self._type_hints(cls)
        except (NameError, TypeError) as exc:
            raise Unsupported(f"{cls.__name__}: type hints do not resolve ({exc})") from None

    def _structure_source(self, cls: type[Any]) -> str:
        hints = self._refuse(cls)
        fields = attrs.fields(cls)
        declared = [f for f in fields if f.name != "unknown"]
        required = [f for f in declared if f.default is attrs.NOTHING]
        lines = [f"def {self._fn('s', cls)}(d):"]
        adapter = self._adapters.get(cls)
        if adapter is not None:
            lines.append(f"    d = {self._const(('adapt', cls), 'adapt', adapter)}(d)")
        # Counts the declared keys found: at zero nothing is left for the
        # unknown bag. A tagged class is reached through its tag: "type" is
        # there, like every required key (or KeyError).
        lines.append(f"    extra = len(d) - {len(required) + (tag_of(cls) is not None)}")
        for f in required:
            v = f"v{declared.index(f)}"
            lines.append(f"    {v} = d[{f.name!r}]")
            lines += self._check(hints[f.name], v, "    ")
        # The optional keys, each read only while some key is unaccounted
        # for: once the count is down to zero the rest are absent.
        for f in _read_order([f for f in declared if f.default is not attrs.NOTHING]):
            v, tp = f"v{declared.index(f)}", hints[f.name]
            lines.append("    if extra:")
            if f.default is None:
                # Null means absent, so one d.get() reads both (a key held
                # as null is not counted: the unknown bag's scan below
                # finds nothing for it).
                lines.append(f"        {v} = d.get({f.name!r})")
                lines.append(f"        if {v} is not None:")
                lines.append("            extra -= 1")
                lines += self._check(_without_none(tp), v, "            ")
                default = "None"
            else:
                default = self._const(("default", cls, f.name), "default", f.default)
                lines.append(f"        if {f.name!r} in d:")
                lines.append("            extra -= 1")
                lines.append(f"            {v} = d[{f.name!r}]")
                lines += self._check(tp, v, "            ")
                lines.append("        else:")
                lines.append(f"            {v} = {default}")
            lines.append("    else:")
            lines.append(f"        {v} = {default}")
        known = self._const(("known", cls), "known", wire_keys(cls))
        empty = self._const(("empty", cls), "empty", attrs.fields_dict(cls)["unknown"].default)
        for f in fields:
            _slot_setter(cls, f.name)  # refuses a field that is not a slot
        lines.append(f"    o = {self._builder_name(cls)}()")
        for f in declared:
            lines.append(f"    o.{f.name} = v{declared.index(f)}")
        lines.append("    if extra == 0:")
        lines.append(f"        o.unknown = {empty}")
        lines.append("    else:")
        lines.append(
            f"        o.unknown = {{k: x for k, x in d.items() if k not in {known}}} or {empty}"
        )
        lines.append(f"    o.__class__ = {self._const(('cls', cls), 'cls', cls)}")
        lines.append("    return o")
        return "\n".join(lines) + "\n"

    def _check(self, tp: Any, v: str, indent: str) -> list[str]:
        """Statements that check the JSON value ``v`` against ``tp`` and
        rebind ``v`` to the structured value."""
        if tp is Any:
            return []
        primitive = _PRIMITIVE.get(tp)
        if primitive is not None:
            condition, label = primitive
            return [
                f"{indent}if {condition.format(v=v)}:",
                f"{indent}    raise WrongType({label!r}, {v})",
            ]
        if tp is int:  # JSON has one number type: 5.0 is the integer 5
            # Only what the encoder can write back: 64-bit integers.
            in_range = f"{INT_MIN} <= {v} <= {INT_MAX}"
            return [
                f"{indent}if type({v}) is not int or not {in_range}:",
                f"{indent}    if type({v}) is float and {v}.is_integer() and {in_range}:",
                f"{indent}        {v} = int_({v})",
                f"{indent}    else:",
                f"{indent}        raise WrongType('an integer', {v})",
            ]
        if typing.get_origin(tp) is list:
            (item,) = typing.get_args(tp)
            out = [
                f"{indent}if type({v}) is not list:",
                f"{indent}    raise WrongType('an array', {v})",
            ]
            if item is Any or item in _PRIMITIVE:  # checks only, then one copy
                out += [f"{indent}for x in {v}:", *self._check(item, "x", indent + "    ")]
                return [*out, f"{indent}{v} = {v}.copy()"]
            return [*out, f"{indent}{v} = [{self._item_fn(item)}(x) for x in {v}]"]
        if attrs.has(tp):
            if tag_of(tp) is not None:
                raise Unsupported(f"the tagged class {tp.__name__} used as a plain field")
            return [
                f"{indent}if type({v}) is not dict:",
                f"{indent}    raise WrongType('an object', {v})",
                f"{indent}{v} = {self._fn('s', tp)}({v})",
            ]
        if not _is_union(tp):
            raise Unsupported(f"no rule for the field type {tp!r}")
        members = typing.get_args(tp)
        rest = tuple(m for m in members if m is not _NoneType)
        if len(rest) != len(members):  # optional: null stays None
            return [
                f"{indent}if {v} is not None:",
                *self._check(_without_none(tp), v, indent + "    "),
            ]
        classes = [m for m in rest if attrs.has(m)]
        if len(rest) == 2 and str in rest and len(classes) == 1:  # media: text or {"url"}
            return [
                f"{indent}if type({v}) is not str:",
                f"{indent}    if type({v}) is not dict:",
                f"{indent}        raise WrongType(\"a string or an object with 'url'\", {v})",
                f"{indent}    {v} = {self._fn('s', classes[0])}({v})",
            ]
        return self._tagged(rest, v, indent)

    def _tagged(self, members: tuple[Any, ...], v: str, indent: str) -> list[str]:
        raw = [m for m in members if attrs.has(m) and is_raw_class(m)]
        tags = {tag_of(m): m for m in members if attrs.has(m) and not is_raw_class(m)}
        if len(raw) != 1 or None in tags or len(tags) + 1 != len(members):
            raise Unsupported(f"a union not tagged by 'type': {members!r}")
        table: dict[str, _Hook] = {}
        table_name = self._const(("tags", members), "tags", table)
        if table is self._ns[table_name]:
            self._tables.append((table, {str(t): self._fn("s", c) for t, c in tags.items()}))
        raw_cls = self._const(("cls", raw[0]), "cls", raw[0])
        lines = [
            f"{indent}if type({v}) is not dict:",
            f"{indent}    raise WrongType('an object', {v})",
            f"{indent}tag = {v}['type']",
        ]
        first_tag, first = next(iter(tags.items()))
        simple = self._simple_fields(first)
        branch = "if"
        if simple is not None:
            # The union's first member (text, in every union of the spec) in
            # its plain shape -- its tag and its fields, nothing else -- is
            # built here without a call; any other shape goes to its function.
            # (Equal to a string, the tag is one: its type is checked after.)
            lines.append(f"{indent}if tag == {first_tag!r} and len({v}) == {len(simple) + 1}:")
            inner = indent + "    "
            for j, (name, hint) in enumerate(simple):
                lines.append(f"{inner}x{j} = {v}[{name!r}]")
                lines += self._check(hint, f"x{j}", inner)
            bag = attrs.fields_dict(first)["unknown"].default
            empty = self._const(("empty", first), "empty", bag)
            lines.append(f"{inner}{v} = {self._builder_name(first)}()")
            for j, (name, _) in enumerate(simple):
                lines.append(f"{inner}{v}.{name} = x{j}")
            lines.append(f"{inner}{v}.unknown = {empty}")
            lines.append(f"{inner}{v}.__class__ = {self._const(('cls', first), 'cls', first)}")
            branch = "elif"
        return [
            *lines,
            f"{indent}{branch} type(tag) is not str:",
            f"{indent}    if tag is None:",
            f"{indent}        raise KeyError('type')",
            f"{indent}    raise WrongType('a string', tag)",
            f"{indent}elif tag in {table_name}:",
            f"{indent}    {v} = {table_name}[tag]({v})",
            f"{indent}else:  # a tag this version does not know (14.3)",
            f"{indent}    {v} = {raw_cls}(raw={v})",
        ]

    def _simple_fields(self, cls: type[Any]) -> list[tuple[str, Any]] | None:
        """``cls``'s fields when all are required primitives (so its plain
        shape can be built inline), else ``None``."""
        if cls in self._adapters:
            return None
        hints = self._refuse(cls)
        declared = [f for f in attrs.fields(cls) if f.name != "unknown"]
        if any(f.default is not attrs.NOTHING for f in declared):
            return None
        if any(hints[f.name] is not Any and hints[f.name] not in _PRIMITIVE for f in declared):
            return None
        return [(f.name, hints[f.name]) for f in declared]

    def _item_fn(self, tp: Any) -> str:
        """The namespace name of a function structuring one list item."""
        key = ("item", repr(tp))
        name = self._names.get(key)
        if name is None:
            name = self._const(key, "item", None)
            body = self._check(tp, "v", "    ")
            exec("\n".join([f"def {name}(v):", *body, "    return v"]) + "\n", self._ns)
        return name

    def _unstructure_source(self, cls: type[Any]) -> str:
        hints = self._refuse(cls)
        declared = [f for f in attrs.fields(cls) if f.name != "unknown"]
        always = [f for f in declared if f.default is not None]
        optional = [f for f in declared if f.default is None]
        tag = tag_of(cls)
        lines = [f"def {self._fn('u', cls)}(o):"]
        items = [f"'type': {tag!r}"] if tag is not None else []
        for i, f in enumerate(always):
            lines.append(f"    a{i} = o.{f.name}")
            items.append(f"{f.name!r}: {self._value(hints[f.name], f'a{i}')}")
        lines.append(f"    out = {{{', '.join(items)}}}")
        for f in optional:
            value = self._value(_without_none(hints[f.name]), "v")
            if value == "v":  # written as it is: two slot reads cost less than a local
                lines.append(f"    if o.{f.name} is not None:")
                lines.append(f"        out[{f.name!r}] = o.{f.name}")
            else:
                lines.append(f"    v = o.{f.name}")
                lines.append("    if v is not None:")
                lines.append(f"        out[{f.name!r}] = {value}")
        # The shared empty bag is recognised by identity, which costs less
        # than asking a mapping proxy for its length; any other bag, empty
        # or not, is written.
        empty = self._const(("empty", cls), "empty", attrs.fields_dict(cls)["unknown"].default)
        lines.append(f"    if o.unknown is not {empty}:")
        lines.append("        out.update(o.unknown)")
        lines.append("    return out")
        return "\n".join(lines) + "\n"

    def _value(self, tp: Any, v: str) -> str:
        """An expression giving the JSON form of ``v`` (a plain name) of ``tp``."""
        if tp is Any or tp is int or tp in _PRIMITIVE:
            return v
        if typing.get_origin(tp) is list:
            (item,) = typing.get_args(tp)
            return (
                f"list({v})"
                if item is Any or item is int or item in _PRIMITIVE
                else f"[{self._value(item, 'x')} for x in {v}]"
            )
        if attrs.has(tp):
            return f"{self._fn('u', tp)}({v})"
        if not _is_union(tp):
            raise Unsupported(f"no rule for the field type {tp!r}")
        members = typing.get_args(tp)
        rest = tuple(m for m in members if m is not _NoneType)
        inner = self._value(rest[0], v) if len(rest) == 1 else self._by_type(rest, v)
        return inner if len(rest) == len(members) else f"(None if {v} is None else {inner})"

    def _by_type(self, members: tuple[Any, ...], v: str) -> str:
        """Dispatch on the exact class of ``v``; text passes as it is."""
        table = self._const(("by_type", members), "by_type", _ByType(self))
        call = f"{table}[type({v})]({v})"
        first = next((m for m in members if attrs.has(m) and tag_of(m) is not None), None)
        simple = None if first is None else self._simple_fields(first)
        if first is not None and simple is not None:
            # The first tagged member with nothing unknown, written inline.
            fields = (f"{n!r}: {v}.{n}" for n, _ in simple)
            items = ", ".join([f"'type': {tag_of(first)!r}", *fields])
            cls = self._const(("cls", first), "cls", first)
            bag = attrs.fields_dict(first)["unknown"].default
            empty = self._const(("empty", first), "empty", bag)
            call = f"({{{items}}} if type({v}) is {cls} and {v}.unknown is {empty} else {call})"
        if str in members:
            return f"({v} if type({v}) is str else {call})"
        return call


def _keep_raw(cls: type[Any], value: Any) -> Any:
    return cls(raw=value)


def _raw(obj: Any) -> Any:
    return obj.raw
