"""An offline, deterministic demo model (no network, no randomness).

It understands just enough to show an agent working:

* arithmetic -- "what is 2+3", "6 times 7": it calls an ``add`` or
  ``multiply`` tool when the request offers one, answers from the tool
  result once it is in the conversation, and computes the answer itself when
  no such tool is offered;
* the time -- "what time is it": it calls a ``now`` tool when offered;
* structured output -- it fills the requested JSON Schema with a minimal
  value (for a plan schema: a one-step plan that uses the matching tool);
* anything else -- a fixed reply quoting the prompt.

Replies stream word by word. :meth:`DemoProvider.tools` returns plain Python
functions (``add``, ``multiply``, ``now``) to give an agent.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from uamp_proto.types import Message, ToolInvocation

from ._function import stream_response, usage_of
from .base import ModelRequest, ModelResponse, ProviderEvent

__all__ = ["DemoProvider", "add", "demo", "multiply", "now"]


def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def multiply(a: float, b: float) -> float:
    """Multiply two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a * b


def now() -> str:
    """The current date and time (UTC, ISO 8601)."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


_NUMBER = r"(-?\d+(?:\.\d+)?)"
_ARITH = re.compile(_NUMBER + r"\s*(\+|plus|\*|x|\u00d7|times)\s*" + _NUMBER, re.IGNORECASE)
_TIME = re.compile(r"\b(time|clock|date|now)\b", re.IGNORECASE)
_OPS = {"+": "add", "plus": "add", "*": "multiply", "x": "multiply", "\u00d7": "multiply",
        "times": "multiply"}  # fmt: skip


# Prompts the built-in strategies add; they are instructions, not the task.
_RUNTIME_PROMPTS = (
    "Think about what to do next",
    "Observations:",
    "Based on your reasoning",
    "Make a plan",
    "Carry out this step",
    "The plan has been executed",
    "Your answer did not match",
)


def _num(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() else value


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _tidy(text: str) -> str:
    """Show a numeric tool result without a needless ``.0``."""
    try:
        return _fmt(float(text))
    except ValueError:
        return text


class _Task:
    """What the conversation asks for, as far as the demo model understands it."""

    def __init__(self, messages: list[Message]) -> None:
        self.kind = "chat"
        self.text = ""
        self.a: int | float = 0
        self.b: int | float = 0
        self.op = ""
        self.results: list[str] = []
        index = -1
        for i in range(len(messages) - 1, -1, -1):
            m = messages[i]
            if m.role != "user" or m.text.startswith(_RUNTIME_PROMPTS):
                continue
            if not self.text:
                self.text, index = m.text, i
            arith = _ARITH.search(m.text)
            if arith:
                self.kind, self.text, index = "arith", m.text, i
                self.a, self.b = _num(arith.group(1)), _num(arith.group(3))
                self.op = _OPS[arith.group(2).lower()]
                break
            if _TIME.search(m.text):
                self.kind, self.text, index = "time", m.text, i
                break
        if index >= 0:
            self.results = [m.text for m in messages[index + 1 :] if m.role == "tool"]

    @property
    def tool(self) -> str | None:
        return {"arith": self.op, "time": "now"}.get(self.kind)

    @property
    def arguments(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b} if self.kind == "arith" else {}

    def computed(self) -> str:
        value = self.a + self.b if self.op == "add" else self.a * self.b
        return _fmt(value)

    def answer(self) -> str:
        sign = "+" if self.op == "add" else "*"
        if self.kind == "arith":
            result = _tidy(self.results[-1]) if self.results else self.computed()
            return f"{_fmt(self.a)} {sign} {_fmt(self.b)} = {result}"
        if self.kind == "time":
            if self.results:
                return f"The current time is {self.results[-1]}."
            return "I cannot tell the time without a clock tool."
        return f"You said: {self.text}" if self.text else "Hello! Ask me to add numbers."


class DemoProvider:
    """The demo model. See the module docstring."""

    def __init__(self, model: str = "uamp-demo-1") -> None:
        self._model = model
        self._counter = 0

    @property
    def name(self) -> str:
        """Always ``"demo"``."""
        return "demo"

    @property
    def model(self) -> str:
        """The model name (``"uamp-demo-1"`` by default)."""
        return self._model

    @staticmethod
    def tools() -> list[Callable[..., Any]]:
        """The functions the demo model knows how to call: add, multiply, now."""
        return [add, multiply, now]

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Answer the request deterministically."""
        message = self._reply(request)
        return ModelResponse(
            message=message,
            usage=usage_of(request.messages, message),
            finish_reason="tool_calls" if message.tool_calls else "stop",
            model=self._model,
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Answer the request, streamed word by word."""
        async for event in stream_response(await self.generate(request)):
            yield event

    def _reply(self, request: ModelRequest) -> Message:
        task = _Task(request.messages)
        offered = {t.function.name for t in request.tools}
        fmt = request.response_format
        if fmt is not None and fmt.type == "json_schema" and fmt.json_schema:
            schema = fmt.json_schema.get("schema", fmt.json_schema)
            value = self._plan(task, schema) if _is_plan(schema) else _example(schema, task)
            return Message(role="assistant", content=orjson.dumps(value).decode())
        tool = task.tool
        if tool is not None and tool in offered and not task.results:
            self._counter += 1
            call = ToolInvocation(
                id=f"demo_call_{self._counter}",
                name=tool,
                arguments=orjson.dumps(task.arguments).decode(),
            )
            return Message(role="assistant", tool_calls=[call])
        return Message(role="assistant", content=task.answer())

    @staticmethod
    def _plan(task: _Task, schema: dict[str, Any]) -> dict[str, Any]:
        tool = task.tool
        if task.results or tool is None:
            steps: list[dict[str, Any]] = [
                {"id": "answer", "description": "Answer the request", "depends_on": []}
            ]
        else:
            steps = [
                {
                    "id": "s1",
                    "description": f"Use {tool} for the request",
                    "tool": tool,
                    "arguments": task.arguments,
                    "depends_on": [],
                }
            ]
        return {"steps": steps}


def _is_plan(schema: dict[str, Any]) -> bool:
    props = schema.get("properties", {})
    return isinstance(props, dict) and "steps" in props


def _example(schema: Any, task: _Task) -> Any:
    """A minimal value matching ``schema`` (required properties only)."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return _example(schema[key][0], task)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        return {k: _example(props.get(k, {}), task) for k in schema.get("required", [])}
    if kind == "array":
        return []
    if kind == "string":
        return task.answer()
    if kind in ("integer", "number"):
        return max(0, schema.get("minimum", 0))
    if kind == "boolean":
        return False
    return None


def demo(model: str = "uamp-demo-1") -> DemoProvider:
    """The offline demo model. See the module docstring."""
    return DemoProvider(model)
