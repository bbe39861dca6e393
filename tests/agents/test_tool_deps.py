"""Typed dependencies: ``Agent.run(..., deps=...)`` reaches tools as ``ToolContext[Deps].deps``."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Annotated, Any

import attrs
import pytest

from uamp_agents import ToolContext, agent, session, tool
from uamp_agents.providers import function
from uamp_proto.types import Message, ToolDefinition

ROOT = Path(__file__).resolve().parents[2]


@attrs.define
class Deps:
    """What the tools of these tests need."""

    prefix: str
    calls: list[str] = attrs.field(factory=list)


def calling(name: str, arguments: dict[str, Any]) -> Any:
    """A model that calls ``name`` once, then answers "done"."""

    def fn(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        return "done" if messages[-1].role == "tool" else [(name, arguments)]

    return function(fn)


def greet(ctx: ToolContext[Deps], name: str) -> str:
    """Greet someone."""
    ctx.deps.calls.append(name)
    return ctx.deps.prefix + name


async def test_deps_reach_a_typed_tool_and_stay_out_of_the_schema() -> None:
    assert list(tool(greet).parameters["properties"]) == ["name"]
    deps = Deps(prefix="hello ")
    a = agent(model=calling("greet", {"name": "ada"}), tools=[greet])
    turn = await a.run("x", deps=deps)
    assert deps.calls == ["ada"]
    assert turn.tool_executions[0].output.result == "hello ada"


async def test_stream_and_session_pass_deps_too() -> None:
    deps = Deps(prefix="hi ")
    a = agent(model=calling("greet", {"name": "bo"}), tools=[greet])
    stream = a.stream("x", deps=deps)
    await stream.turn
    s = session(a)
    await s.run("y", deps=deps)
    assert deps.calls == ["bo", "bo"]


async def test_without_deps_a_tool_sees_none() -> None:
    seen: list[object] = []

    def look(ctx: Annotated[ToolContext[None], "the run"]) -> str:
        seen.append(ctx.deps)
        return "ok"

    await agent(model=calling("look", {}), tools=[look]).run("x")
    assert seen == [None]


async def test_a_sub_agent_tool_gets_its_parent_deps() -> None:
    deps = Deps(prefix="sub ")
    child = agent(name="child", model=calling("greet", {"name": "cy"}), tools=[greet])
    parent = agent(model=calling("child", {"task": "greet cy"}), tools=[child])
    await parent.run("x", deps=deps)
    assert deps.calls == ["cy"]


def test_mypy_checks_attributes_of_deps(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    program = tmp_path / "uses_deps.py"
    program.write_text(
        textwrap.dedent(
            """
            import attrs
            from uamp_agents import ToolContext

            @attrs.define
            class Deps:
                prefix: str

            def good(ctx: ToolContext[Deps]) -> str:
                return ctx.deps.prefix.upper()

            def bad(ctx: ToolContext[Deps]) -> str:
                return ctx.deps.prefx
            """
        )
    )
    out, _, status = api.run(
        [
            str(program),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--follow-imports=silent",
        ]
    )
    assert status == 1, out
    lines = program.read_text().splitlines()
    good_line = lines.index("def good(ctx: ToolContext[Deps]) -> str:") + 2
    bad_line = lines.index("    return ctx.deps.prefx") + 1
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert not [e for e in errors if f"uses_deps.py:{good_line}:" in e], out
    assert any(
        f"uses_deps.py:{bad_line}:" in e and '"Deps" has no attribute "prefx"' in e for e in errors
    ), out
