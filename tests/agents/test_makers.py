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
    """A validator or converter makes the maker call the class; a post-init hook and a
    dict-based class are built in place, as the class builds them."""

    @attrs.define(kw_only=True)
    class Checked:
        x: int = attrs.field(validator=attrs.validators.instance_of(int))

    @attrs.define(kw_only=True)
    class Converted:
        x: int = attrs.field(converter=int)

    @attrs.define(kw_only=True)
    class Posted:
        x: int
        seen: list[int] = attrs.Factory(list)

        def __attrs_post_init__(self) -> None:
            self.seen.append(self.x)

    @attrs.define(kw_only=True, slots=False)
    class Dicted:
        x: int
        y: list[int] = attrs.Factory(list)
        z: int = attrs.field(init=False, eq=False)

    for cls in (Checked, Converted):
        assert not _fastinit._plain_mutable(cls)
    for cls in (Posted, Dicted):
        assert _fastinit._plain_mutable(cls)
    assert _fastinit.maker(Posted, ("x",))(3).seen == [3]
    with pytest.raises(TypeError):
        _fastinit.maker(Checked, ("x",))("3")  # the validator runs
    assert _fastinit.maker(Converted, ("x",))("3").x == 3  # the converter runs
    made = _fastinit.maker(Dicted, ("x",))(1)
    assert made == Dicted(x=1)
    assert vars(made) == vars(Dicted(x=1)) == {"x": 1, "y": []}  # z left unset, as __init__ does
    assert made.y is not _fastinit.maker(Dicted, ("x",))(1).y


def test_the_run_context_maker_builds_what_the_class_builds() -> None:
    """``new_context``: ``ExecutionContext(**kw)``'s instance, the same dict key order included."""
    from uamp_agents.context import ExecutionContext, new_context
    from uamp_proto.types import Message

    order = ("agent", "llm", "input", "history", "tools", "strategy", "run", "params", "system",
             "structure", "structure_type", "emitter", "upp_emitter", "uap_emitter", "checks",
             "listeners", "on_step", "metadata", "tool_choice", "deps", "stream_model",
             "stream_steps")  # fmt: skip
    assert sorted(order) == sorted(f.alias for f in attrs.fields(ExecutionContext) if f.init)
    values: dict[str, Any] = {name: object() for name in order}
    values.update(input=Message(role="user", content="hi"), history=[], tools=[], metadata={"k": 1})
    made = new_context(*(values[name] for name in order))
    built = ExecutionContext(**values)
    assert type(made) is ExecutionContext
    assert list(vars(made)) == list(vars(built))  # the same keys, in the same order
    for key, value in vars(built).items():
        if key == "state":
            assert _fields(made.state) == _fields(value)
        else:
            assert vars(made)[key] == value, key
    assert made.state.tool_executions is made.tool_executions
    again = new_context(*(values[name] for name in order))
    for key in ("tool_executions", "pending_tool_calls", "_step_usage", "_suspended"):
        assert vars(again)[key] is not vars(made)[key]  # a factory's new object each time
    with pytest.raises(TypeError):
        _fastinit.maker(ExecutionContext, ("agent",))  # required fields missing
