"""Cheaper constructors for the frozen attrs classes of the protocol.

Theory of operation
-------------------
attrs' ``__init__`` of a frozen slotted class cannot store a field the
ordinary way (the class's ``__setattr__`` refuses), so it binds
``object.__setattr__`` to the instance and calls it once per field. A
``response.delta`` with its text delta, built once per streamed token, paid
about 15,000 interpreter instructions for that (callgrind), a third of what
serving the token over SSE cost in all.

:func:`install` gives such a class an ``__init__`` compiled from the same
field metadata, with the same signature and defaults, that moves the new
instance to the class's builder (:func:`uamp_proto._hookgen._builder`: a
subclass of the same layout whose ``__setattr__`` is ``object``'s), stores
every field with a plain attribute store and moves the instance back: two
class switches instead of one call per field, 40% fewer instructions
for a seven-field event. Nothing else changes: the instance is the same
frozen object, equal to what attrs builds.

Only what attrs' init would do by plain stores is compiled: a class with
validators, converters, ``init=False`` fields, factories that take ``self``,
pre- or post-init hooks, slots other than its fields (a cached hash), or
that is not frozen and slotted keeps attrs' own ``__init__``. An instance of
a subclass without an ``__init__`` of its own (whose layout may differ) is
built by attrs' ``__init__``, which the compiled one keeps as its
``__wrapped__``.

:func:`replacer` compiles the other thing ``attrs.evolve`` does on a hot
path: a copy of an instance with a few fields replaced, as one constructor
call with every other init field read straight off the instance (what
``evolve`` does through a loop over the fields and a keyword dict; a fifth
of its cost for a twelve-field event).

:func:`maker` compiles a constructor for a hot call site that always passes
the same fields: ``make(v0, v1, ...)`` takes them positionally and builds
the instance on the builder directly, with the other fields' defaults (a
mutable slotted class whose ``__init__`` only stores -- no validators,
converters, setattr hooks or init hooks -- is built by plain stores on a
new instance, ``init=False`` fields' defaults included).
Calling a class with keywords costs CPython a keyword dict, which the
class's ``__init__`` unpacks again; a positional function call does not
(a twenty-field ``TurnRequest``: 1.1 -> 0.45 µs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import attrs

from ._hookgen import _builder

__all__ = ["install", "maker", "replacer"]


def _slots(cls: type[Any]) -> set[str]:
    """Every slot of ``cls`` and its bases."""
    names: set[str] = set()
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.update((slots,) if isinstance(slots, str) else slots)
    return names


def _eligible(cls: type[Any]) -> bool:
    """Whether attrs' ``__init__`` of ``cls`` only stores its arguments and defaults."""
    props = getattr(cls, "__attrs_props__", None)
    if props is None or not (props.is_frozen and props.is_slotted and props.added_init):
        return False
    if "__attrs_pre_init__" in dir(cls) or "__attrs_post_init__" in dir(cls):
        return False
    fields = attrs.fields(cls)
    for field in fields:
        if not field.init or field.validator is not None or field.converter is not None:
            return False
        default = field.default
        if isinstance(default, attrs.Factory) and default.takes_self:  # type: ignore[arg-type]
            return False
    if any(f.alias == "self" for f in fields):
        return False
    # (Other names of the generated code start with "_", which no alias does.)
    return _slots(cls) - {"__weakref__"} == {f.name for f in fields}


def _compile(cls: type[Any]) -> Callable[..., None]:
    """The ``__init__`` described in the module docstring, for an eligible ``cls``."""
    original = cls.__init__
    namespace: dict[str, Any] = {
        "_C": cls,
        "_B": _builder(cls),
        "_attrs_init": original,
        "_set": object.__setattr__,
        "_NOTHING": attrs.NOTHING,
        "_type": type,  # a field may be called ``type``
    }
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    passed: list[str] = []
    for i, field in enumerate(attrs.fields(cls)):
        name, alias = field.name, field.alias
        default = field.default
        param = alias
        if default is attrs.NOTHING:
            pass
        elif isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            namespace[f"_f{i}"] = default.factory
            param = f"{alias}=_NOTHING"
            body.append(f"    if {alias} is _NOTHING:")
            body.append(f"        {alias} = _f{i}()")
        else:
            namespace[f"_d{i}"] = default
            param = f"{alias}=_d{i}"
        (keyword if field.kw_only else positional).append(param)
        body.append(f"    self.{name} = {alias}")
        passed.append(f"{alias}={alias}")
    params = ["self", *positional, *(["*", *keyword] if keyword else [])]
    lines = [
        f"def __init__({', '.join(params)}):",
        "    if _type(self) is not _C:",
        f"        return _attrs_init(self, {', '.join(passed)})",
        "    _set(self, '__class__', _B)",
        *body,
        "    self.__class__ = _C",
    ]
    exec("\n".join(lines), namespace)
    init: Callable[..., None] = namespace["__init__"]
    init.__annotations__ = dict(getattr(original, "__annotations__", {}))
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = original.__doc__
    init.__wrapped__ = original  # type: ignore[attr-defined]
    return init


def install(namespace: Mapping[str, object]) -> list[type[Any]]:
    """Give every eligible frozen attrs class defined in ``namespace`` (a module's
    ``globals()``) the compiled ``__init__``; returns those classes."""
    module = namespace.get("__name__")
    done: list[type[Any]] = []
    for value in list(namespace.values()):
        if not isinstance(value, type) or value.__module__ != module:
            continue
        if "__attrs_attrs__" not in value.__dict__ or not _eligible(value):
            continue
        value.__init__ = _compile(value)  # type: ignore[misc]
        done.append(value)
    return done


_REPLACERS: dict[tuple[type[Any], tuple[str, ...]], Callable[..., Any]] = {}


def replacer(cls: type[Any], names: tuple[str, ...]) -> Callable[..., Any]:
    """``f(instance, *values)``: ``attrs.evolve(instance, **dict(zip(names, values)))``.

    Compiled once per class and names (``names`` are init aliases of
    ``cls``); builds through ``cls``'s own ``__init__``, as ``evolve`` does.
    """
    key = (cls, names)
    made = _REPLACERS.get(key)
    if made is not None:
        return made
    given = {alias: f"_v{i}" for i, alias in enumerate(names)}
    passed = [
        f"{f.alias}={given.get(f.alias) or '_i.' + f.name}" for f in attrs.fields(cls) if f.init
    ]
    if set(given) - {f.alias for f in attrs.fields(cls) if f.init}:
        raise TypeError(f"{cls.__name__} has no init field(s) {sorted(given)}")
    source = f"def replace(_i, {', '.join(given.values())}):\n    return _C({', '.join(passed)})\n"
    namespace: dict[str, Any] = {"_C": cls}
    exec(source, namespace)
    compiled: Callable[..., Any] = namespace["replace"]
    _REPLACERS[key] = compiled
    return compiled


def _default(cls: type[Any], field: Any, i: int, namespace: dict[str, Any]) -> str:
    """The source of field number ``i``'s default (its value or factory put in ``namespace``).

    Raises:
        TypeError: The field is required.
    """
    default = field.default
    if default is attrs.NOTHING:
        raise TypeError(f"{cls.__name__}: the required field {field.alias!r} is not given")
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        namespace[f"_f{i}"] = default.factory
        return f"_f{i}()"
    namespace[f"_d{i}"] = default
    return f"_d{i}"


def _plain_mutable(cls: type[Any]) -> bool:
    """Whether ``cls`` is a mutable attrs class whose ``__init__`` only stores its
    arguments and defaults, then maybe runs ``__attrs_post_init__``, with no
    setattr hook. Slotted or not: a dict-based one gets its keys in ``__init__``'s
    order (so its instances keep sharing their dict keys)."""
    props = getattr(cls, "__attrs_props__", None)
    if props is None or props.is_frozen or not props.added_init:
        return False
    if "__attrs_pre_init__" in dir(cls):
        return False
    setter: object = cls.__setattr__
    if setter is not object.__setattr__:  # on_setattr hooks (validators, converters)
        return False
    fields = attrs.fields(cls)
    for field in fields:
        if field.validator is not None or field.converter is not None:
            return False
        default = field.default
        if isinstance(default, attrs.Factory) and default.takes_self:  # type: ignore[arg-type]
            return False
    return not props.is_slotted or _slots(cls) - {"__weakref__"} == {f.name for f in fields}


_MAKERS: dict[tuple[type[Any], tuple[str, ...]], Callable[..., Any]] = {}
_T = TypeVar("_T")


def maker(cls: type[_T], names: tuple[str, ...]) -> Callable[..., _T]:
    """``f(*values)``: ``cls(**dict(zip(names, values)))``, compiled once per class and names.

    For a class :func:`install` could compile, or a mutable one whose
    ``__init__`` only stores (:func:`_plain_mutable`), the instance is built
    in place (the other fields get their defaults, a factory's a new object
    each time); any other class is called with the keywords.
    """
    key = (cls, names)
    made = _MAKERS.get(key)
    if made is not None:
        return made
    fields = {f.alias: f for f in attrs.fields(cast(Any, cls)) if f.init}
    if set(names) - set(fields) or len(set(names)) != len(names):
        raise TypeError(f"{cls.__name__} has no init field(s) {sorted(set(names) - set(fields))}")
    given = {alias: f"_v{i}" for i, alias in enumerate(names)}
    params = ", ".join(given.values())
    namespace: dict[str, Any] = {"_C": cls}
    if _eligible(cls):
        namespace["_B"] = _builder(cls)
        body = ["    _o = _B()"]
        for i, (alias, field) in enumerate(fields.items()):
            value = given.get(alias) or _default(cls, field, i, namespace)
            body.append(f"    _o.{field.name} = {value}")
        body += ["    _o.__class__ = _C", "    return _o"]
        source = f"def make({params}):\n" + "\n".join(body) + "\n"
    elif _plain_mutable(cls):
        namespace["_new"] = object.__new__
        body = ["    _o = _new(_C)"]
        for i, field in enumerate(attrs.fields(cast(Any, cls))):
            if not field.init and field.default is attrs.NOTHING:
                continue  # __init__ leaves it unset too
            value = (given.get(field.alias) if field.init else None) or _default(
                cls, field, i, namespace
            )
            body.append(f"    _o.{field.name} = {value}")
        if "__attrs_post_init__" in dir(cls):
            body.append("    _o.__attrs_post_init__()")
        body.append("    return _o")
        source = f"def make({params}):\n" + "\n".join(body) + "\n"
    else:
        passed = ", ".join(f"{alias}={value}" for alias, value in given.items())
        source = f"def make({params}):\n    return _C({passed})\n"
    exec(source, namespace)
    compiled: Callable[..., _T] = namespace["make"]
    _MAKERS[key] = compiled
    return compiled
