"""The compiled constructors of the frozen protocol classes (:mod:`uamp_proto._fastinit`).

Every class that got one must build exactly what attrs' own ``__init__``
(kept as ``__init__.__wrapped__``) builds, refuse the same calls, and stay
frozen; the classes it cannot express keep attrs' ``__init__``.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import attrs
import pytest

from uamp_proto import _fastinit, responder
from uamp_proto import events as ev
from uamp_proto import types as ty

COMPILED = [*ty.FAST_INIT, *ev.FAST_INIT, *responder.FAST_INIT]


def _all_attrs_classes() -> list[type[Any]]:
    return [
        v
        for module in (ty, ev)
        for v in vars(module).values()
        if isinstance(v, type)
        and "__attrs_attrs__" in v.__dict__
        and v.__module__ == module.__name__
    ]


def _by_attrs(cls: type[Any], **kwargs: Any) -> Any:
    """An instance of ``cls`` built by attrs' own ``__init__``."""
    obj = object.__new__(cls)
    cls.__init__.__wrapped__(obj, **kwargs)
    return obj


def _fields(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in attrs.fields(type(obj))}


def _args(cls: type[Any], every: bool) -> dict[str, Any]:
    """A value for every field (``every``) or for the required ones only: distinct objects."""
    return {f.alias: object() for f in attrs.fields(cls) if every or f.default is attrs.NOTHING}


def test_the_hot_classes_and_every_protocol_class_are_compiled() -> None:
    assert ev.ResponseDelta in COMPILED and ty.DeltaText in COMPILED
    assert responder.TurnRequest in COMPILED
    compiled = [c.__name__ for c in COMPILED if c not in responder.FAST_INIT]
    assert sorted(c.__name__ for c in _all_attrs_classes()) == sorted(compiled)


@pytest.mark.parametrize("cls", COMPILED, ids=lambda c: c.__name__)
def test_builds_what_attrs_builds(cls: type[Any]) -> None:
    for every in (True, False):
        kwargs = _args(cls, every)
        made = cls(**kwargs)
        assert type(made) is cls
        assert _fields(made) == _fields(_by_attrs(cls, **kwargs))
    # A default made by a factory is a new object each time, as with attrs.
    for field in attrs.fields(cls):
        if isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            one, two = cls(**_args(cls, False)), cls(**_args(cls, False))
            assert getattr(one, field.name) == getattr(two, field.name)
            assert getattr(one, field.name) is not getattr(two, field.name)


@pytest.mark.parametrize("cls", COMPILED, ids=lambda c: c.__name__)
def test_refuses_what_attrs_refuses_and_stays_frozen(cls: type[Any]) -> None:
    assert inspect.signature(cls.__init__) == inspect.signature(cls.__init__.__wrapped__)
    required = _args(cls, False)
    for name in required:
        partial = {k: v for k, v in required.items() if k != name}
        for build in (cls, lambda **kw: _by_attrs(cls, **kw)):
            with pytest.raises(TypeError):
                build(**partial)
    for build in (cls, lambda **kw: _by_attrs(cls, **kw)):
        with pytest.raises(TypeError):
            build(**required, not_a_field=1)
    made = cls(**required)
    name = attrs.fields(cls)[0].name
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(made, name, 1)


def test_copies_evolves_and_subclasses() -> None:
    delta = ev.ResponseDelta(delta=ty.DeltaText(text="a"), response_id="resp_1")
    # (Deep copies and pickles fail alike before and after: ``unknown`` is a
    # mappingproxy.)
    assert copy.copy(delta) == delta
    evolved = attrs.evolve(delta, session_id="sess_1")
    assert type(evolved) is ev.ResponseDelta and evolved.session_id == "sess_1"
    assert evolved.response_id == "resp_1"

    class Mine(ty.DeltaText):  # no slots: another layout, built by attrs' __init__
        pass

    mine = Mine(text="b")
    assert type(mine) is Mine and mine.text == "b" and mine.unknown == ty.EMPTY


def _module(*classes: type[Any]) -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": __name__}
    for cls in classes:
        namespace[cls.__name__] = cls
    return namespace


def test_what_it_cannot_express_keeps_attrs_init() -> None:
    @attrs.frozen(kw_only=True)
    class Validated:
        x: int = attrs.field(validator=attrs.validators.instance_of(int))

    @attrs.frozen(kw_only=True)
    class Converted:
        x: int = attrs.field(converter=int)

    @attrs.frozen(kw_only=True)
    class PostInit:
        x: int

        def __attrs_post_init__(self) -> None:
            pass

    @attrs.frozen(kw_only=True, cache_hash=True)
    class CachedHash:
        x: int

    @attrs.frozen(kw_only=True)
    class SelfFactory:
        x: int = attrs.field(default=attrs.Factory(lambda self: 1, takes_self=True))

    @attrs.define(kw_only=True)
    class Mutable:
        x: int

    @attrs.frozen(slots=False)
    class NoSlots:
        x: int

    @attrs.frozen
    class Plain:
        x: int
        y: list[int] = attrs.Factory(list)
        z: int = attrs.field(default=3, kw_only=True)

    refused = (Validated, Converted, PostInit, CachedHash, SelfFactory, Mutable, NoSlots)
    originals = {cls: cls.__init__ for cls in refused}
    assert _fastinit.install(_module(*refused, Plain)) == [Plain]
    assert all(cls.__init__ is originals[cls] for cls in refused)
    with pytest.raises(TypeError):
        Validated(x="1")  # the validator still runs
    assert Converted(x="2").x == 2
    # Positional fields stay positional, keyword-only ones keyword-only.
    made = Plain(1, [2], z=4)
    assert (made.x, made.y, made.z) == (1, [2], 4)
    assert Plain(1).y == [] and Plain(1).z == 3
    with pytest.raises(TypeError):
        Plain(1, [2], 4)


@pytest.mark.parametrize("cls", _all_attrs_classes(), ids=lambda c: c.__name__)
def test_the_compiled_replace_is_attrs_evolve(cls: type[Any]) -> None:
    """``replacer`` (behind ``events.with_ids``) builds what ``attrs.evolve`` builds."""
    made = cls(**_args(cls, True))
    aliases = [f.alias for f in attrs.fields(cls) if f.init]
    for names in ({*aliases} & {"session_id", "response_id"}, aliases[:1], aliases[-2:]):
        names = tuple(sorted(names))
        values = [object() for _ in names]
        replaced = _fastinit.replacer(cls, names)(made, *values)
        assert type(replaced) is cls
        assert _fields(replaced) == _fields(
            attrs.evolve(made, **dict(zip(names, values, strict=True)))
        )
    with pytest.raises(TypeError):
        _fastinit.replacer(cls, ("not_a_field",))


@pytest.mark.parametrize("cls", [c for c in _all_attrs_classes() if issubclass(c, ev.Event)])
def test_with_ids_is_the_evolve_it_replaces(cls: type[Any]) -> None:
    """Every event class: ids filled in only where missing, as ``attrs.evolve`` did."""
    has_rid = "response_id" in {f.alias for f in attrs.fields(cls)}
    for own_sid in (None, "sess_own"):
        for own_rid in (None, "resp_own") if has_rid else (None,):
            ids = {"session_id": own_sid, **({"response_id": own_rid} if has_rid else {})}
            event = cls(**{**_args(cls, False), **ids})
            for sid in (None, "sess_new"):
                for rid in (None, "resp_new"):
                    changes: dict[str, Any] = {}
                    if sid is not None and own_sid is None:
                        changes["session_id"] = sid
                    if has_rid and rid is not None and own_rid is None:
                        changes["response_id"] = rid
                    stamped = ev.with_ids(event, session_id=sid, response_id=rid)
                    if not changes:
                        assert stamped is event
                    else:
                        assert _fields(stamped) == _fields(attrs.evolve(event, **changes))


def test_with_interrupts_is_the_evolve_it_replaces() -> None:
    """``responder.with_interrupts``: ``attrs.evolve(request, interrupts=port)``, the port too."""
    request = responder.TurnRequest(**_args(responder.TurnRequest, True))
    port = object()
    made = responder.with_interrupts(request, port)  # type: ignore[arg-type]
    assert type(made) is responder.TurnRequest and made.interrupts is port
    assert _fields(made) == _fields(attrs.evolve(request, interrupts=port))
    assert responder.with_interrupts(made, None).interrupts is None


@pytest.mark.parametrize("cls", [*COMPILED, ty.Message], ids=lambda c: c.__name__)
def test_the_compiled_maker_builds_what_the_class_builds(cls: type[Any]) -> None:
    """``maker`` (behind the hot call sites' positional constructors): ``cls(**kwargs)``."""
    aliases = [f.alias for f in attrs.fields(cls) if f.init]
    required = [f.alias for f in attrs.fields(cls) if f.init and f.default is attrs.NOTHING]
    for names in (aliases, required, [*required, *aliases[-1:]], aliases[::-1]):
        names = list(dict.fromkeys(names))
        values = [object() for _ in names]
        made = _fastinit.maker(cls, tuple(names))(*values)
        assert type(made) is cls
        assert _fields(made) == _fields(cls(**dict(zip(names, values, strict=True))))
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(made, attrs.fields(cls)[0].name, 1)
    # A default made by a factory is a new object each time.
    make = _fastinit.maker(cls, tuple(required))
    args = [object() for _ in required]
    for field in attrs.fields(cls):
        if isinstance(field.default, attrs.Factory) and field.alias not in required:  # type: ignore[arg-type]
            assert getattr(make(*args), field.name) is not getattr(make(*args), field.name)
    assert _fastinit.maker(cls, tuple(required)) is make  # compiled once
    with pytest.raises(TypeError):
        _fastinit.maker(cls, ("not_a_field",))
    if required:
        with pytest.raises(TypeError):
            _fastinit.maker(cls, tuple(required[1:]))(*args[1:])


def test_the_maker_of_a_class_it_cannot_compile_calls_the_class() -> None:
    @attrs.frozen(kw_only=True)
    class Validated:
        x: int = attrs.field(validator=attrs.validators.instance_of(int))
        y: list[int] = attrs.Factory(list)

    make = _fastinit.maker(Validated, ("x",))
    assert make(1) == Validated(x=1)
    with pytest.raises(TypeError):
        make("1")  # the validator runs
