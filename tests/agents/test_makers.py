"""``uamp_proto._fastinit.maker`` on the runtime's mutable classes: what the class builds."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from uamp_agents.state import ExecutionState
from uamp_agents.tools import ToolContext
from uamp_agents.turn import ToolExecution, Turn
from uamp_proto import _fastinit


def _fields(obj: Any) -> dict[str, Any]:
    """Every field, a fresh random id (a turn's own, when not given) as its kind."""
    made = {f.name: getattr(obj, f.name) for f in attrs.fields(type(obj))}
    if isinstance(obj, Turn) and isinstance(made["id"], str):
        made["id"] = len(made["id"])
    return made


@pytest.mark.parametrize(
    "cls", [ExecutionState, ToolContext, ToolExecution, Turn], ids=lambda c: c.__name__
)
def test_a_mutable_slotted_class_is_built_by_plain_stores(cls: type[Any]) -> None:
    assert _fastinit._plain_mutable(cls)
    aliases = [f.alias for f in attrs.fields(cls) if f.init]
    required = [f.alias for f in attrs.fields(cls) if f.init and f.default is attrs.NOTHING]
    for names in (aliases, required, aliases[::-1]):
        values = [object() for _ in names]
        made = _fastinit.maker(cls, tuple(names))(*values)
        assert type(made) is cls
        assert _fields(made) == _fields(cls(**dict(zip(names, values, strict=True))))
        setattr(made, attrs.fields(cls)[0].name, 1)  # still mutable
    make = _fastinit.maker(cls, tuple(required))
    args = [object() for _ in required]
    for field in attrs.fields(cls):
        if isinstance(field.default, attrs.Factory) and field.alias not in required:  # type: ignore[arg-type]
            assert getattr(make(*args), field.name) is not getattr(make(*args), field.name)
    if required:
        with pytest.raises(TypeError):
            _fastinit.maker(cls, tuple(required[1:]))


def test_a_mutable_class_with_hooks_is_called_with_keywords() -> None:
    @attrs.define(kw_only=True)
    class Checked:
        x: int = attrs.field(validator=attrs.validators.instance_of(int))

    @attrs.define(kw_only=True)
    class Posted:
        x: int
        seen: list[int] = attrs.Factory(list)

        def __attrs_post_init__(self) -> None:
            self.seen.append(self.x)

    @attrs.define(kw_only=True, slots=False)
    class Dicted:
        x: int

    for cls in (Checked, Posted, Dicted):
        assert not _fastinit._plain_mutable(cls)
    assert _fastinit.maker(Posted, ("x",))(3).seen == [3]
    with pytest.raises(TypeError):
        _fastinit.maker(Checked, ("x",))("3")  # the validator runs
    assert _fastinit.maker(Dicted, ("x",))(1) == Dicted(x=1)
