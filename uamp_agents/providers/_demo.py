"""An offline, deterministic demo model (no network, no randomness).

It understands just enough to show an agent working:

* arithmetic -- "what is 2+3", "6 times 7": it calls an ``add`` or
  ``multiply`` tool when the request offers one, answers from the tool
  result once it is in the conversation, and computes the answer itself when
  no such tool is offered;
* the time -- "what time is it": it calls a ``now`` tool when offered;
* structured output -- it fills the requested JSON Schema with a minimal
  value (for a plan schema: a one-step plan that uses the matching tool);
* other offered tools (a served agent's *client* tools, for instance) --
  it calls one when the request's text names it (``get_weather`` or ``get
  weather``, as a whole word), filling every required string argument with
  the text (other required types get ``0``, ``false``, ``[]``, ``{}``; a
  tool without required arguments gets ``{"query": text}``); with a result
  in the conversation it says ``Tool <name> returned: <result>``;
* anything else -- a fixed reply quoting the prompt.

Only the latest user message is the task (prompts the built-in strategies
add are skipped), and only tool results after it count. ``tool_choice`` is
honoured: ``"none"`` never calls a tool; ``"required"`` calls the task's
tool, else a named one, else the first offered tool other than ``add``,
``multiply`` and ``now`` (else the first one); a named function is
called (with the task's tool beside it when that applies too); ``"auto"``
follows the rules above. A tool already answered after the task is not
called again. Call ids are derived from the conversation, so the same
conversation always gets the same reply, ids included.

``params["max_tokens"]`` cuts a text reply to that many words
(``finish_reason="length"``). Replies stream word by word.
:meth:`DemoProvider.tools` returns plain Python functions (``add``,
``multiply``, ``now``) to give an agent.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from uamp_proto.responder import placeholder_arguments
from uamp_proto.types import Message, ToolInvocation, ToolResultContent

from ._function import response_events, usage_of
from .base import ModelRequest, ModelResponse, NamedProvider, ProviderEvent
from .catalog import ModelInfo

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


_KNOWN_TOOLS = frozenset({"add", "multiply", "now"})


class _Task:
    """What the conversation asks for, as far as the demo model understands it.

    The task is the latest user message that is not a strategy's prompt;
    ``results`` are the tool results after it, ``answered`` the names of
    the tools they came from.
    """

    def __init__(self, messages: list[Message]) -> None:
        self.kind = "chat"
        self.text = ""
        self.a: int | float = 0
        self.b: int | float = 0
        self.op = ""
        self.results: list[str] = []
        self.named_results: list[tuple[str, str]] = []
        #: Tools whose result was an error (``is_error``), with its text.
        self.failed: dict[str, str] = {}
        index = -1
        for i in range(len(messages) - 1, -1, -1):
            m = messages[i]
            if m.role == "user" and not m.text.startswith(_RUNTIME_PROMPTS):
                index = i
                break
        if index < 0:
            return
        self.text = messages[index].text
        arith = _ARITH.search(self.text)
        if arith:
            self.kind = "arith"
            self.a, self.b = _num(arith.group(1)), _num(arith.group(3))
            self.op = _OPS[arith.group(2).lower()]
        elif _TIME.search(self.text):
            self.kind = "time"
        names = {c.id: c.name for m in messages for c in m.tool_calls or ()}
        for m in messages[index + 1 :]:
            if m.role == "tool":
                name = m.name or names.get(m.tool_call_id or "", "tool")
                self.results.append(m.text)
                self.named_results.append((name, m.text))
                if any(
                    isinstance(i, ToolResultContent) and i.tool_result.is_error
                    for i in m.content_items or ()
                ):
                    self.failed[name] = m.text

    @property
    def tool(self) -> str | None:
        return {"arith": self.op, "time": "now"}.get(self.kind)

    @property
    def answered(self) -> set[str]:
        return {name for name, _ in self.named_results}

    def mentions(self, name: str) -> bool:
        """Whether the task's text names the tool (underscores may be spaces)."""
        for form in {name, name.replace("_", " ")}:
            if re.search(r"(?<![\w])" + re.escape(form) + r"(?![\w])", self.text, re.IGNORECASE):
                return True
        return False

    @property
    def arguments(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b} if self.kind == "arith" else {}

    def computed(self) -> str:
        value = self.a + self.b if self.op == "add" else self.a * self.b
        return _fmt(value)

    def answer(self) -> str:
        own = [r for name, r in self.named_results if name == self.tool]
        others = [f"Tool {n} returned: {r}" for n, r in self.named_results if n != self.tool]
        sign = "+" if self.op == "add" else "*"
        if self.kind == "arith" and self.tool in self.failed:
            # An error result is no value: say what happened instead of using it.
            main = (
                f"I could not {self.op} {_fmt(self.a)} and {_fmt(self.b)}: "
                f"{self.failed[self.tool or '']}"
            )
        elif self.kind == "arith":
            result = _tidy(own[-1]) if own else self.computed()
            main = f"{_fmt(self.a)} {sign} {_fmt(self.b)} = {result}"
        elif self.kind == "time":
            if own:
                main = f"The current time is {own[-1]}."
            else:
                main = "I cannot tell the time without a clock tool."
        elif others:
            return " ".join(others)
        else:
            main = f"You said: {self.text}" if self.text else "Hello! Ask me to add numbers."
        return " ".join([*others, main])


#: The demo model's context window, in (whitespace-separated) tokens: it reads
#: the whole conversation every time, so any size would do; this one is stated.
DEMO_CONTEXT_WINDOW = 32_768


class DemoProvider(NamedProvider):
    """The demo model, ``"demo"`` (see the module docstring)."""

    provider_name = "demo"

    def __init__(self, model: str = "uamp-demo-1") -> None:
        super().__init__(model)

    @staticmethod
    def model_info() -> ModelInfo:
        """Text only, no reasoning or caching; calls tools, several at once."""
        return ModelInfo(
            modalities=("text",),
            supports_thinking=False,
            supports_tools=True,
            supports_parallel_tools=True,
            supports_caching=False,
            context_window=DEMO_CONTEXT_WINDOW,
        )

    @staticmethod
    def tools() -> list[Callable[..., Any]]:
        """The functions the demo model knows how to call: add, multiply, now."""
        return [add, multiply, now]

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Answer the request deterministically."""
        message = self._reply(request)
        finish = "tool_calls" if message.tool_calls else "stop"
        limit = request.params.get("max_tokens")
        if not message.tool_calls and isinstance(limit, int) and limit > 0:
            words = message.text.split(" ")
            if len(words) > limit:
                message = Message(role="assistant", content=" ".join(words[:limit]))
                finish = "length"
        return ModelResponse(
            message=message,
            usage=usage_of(request.messages, message),
            finish_reason=finish,
            model=self._model,
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Answer the request, streamed word by word."""
        for event in response_events(await self.generate(request)):
            yield event

    def _reply(self, request: ModelRequest) -> Message:
        task = _Task(request.messages)
        fmt = request.response_format
        if fmt is not None and fmt.type == "json_schema" and fmt.json_schema:
            schema = fmt.json_schema.get("schema", fmt.json_schema)
            value = self._plan(task, schema) if _is_plan(schema) else _example(schema, task)
            return Message(role="assistant", content=orjson.dumps(value).decode())
        calls = [
            ToolInvocation(id=_call_id(request.messages, name, i), name=name, arguments=arguments)
            for i, (name, arguments) in enumerate(self._choose(task, request))
        ]
        if calls:
            return Message(role="assistant", tool_calls=calls)
        return Message(role="assistant", content=task.answer())

    @staticmethod
    def _choose(task: _Task, request: ModelRequest) -> list[tuple[str, str]]:
        """The calls to make now, as (name, JSON arguments); see the module docstring."""
        choice = request.tool_choice
        offered = {t.function.name: t for t in request.tools}
        if choice == "none" or not offered:
            return []
        answered = task.answered
        chosen: list[str] = []
        own = task.tool
        if own is not None and own in offered and own not in answered:
            chosen.append(own)
        candidates = [n for n in offered if n not in answered and n not in chosen]
        other: str | None = None
        if isinstance(choice, dict):
            named = (choice.get("function") or {}).get("name")
            if named in candidates:
                other = named
        else:
            other = next(
                (n for n in candidates if n not in _KNOWN_TOOLS and task.mentions(n)), None
            )
            if other is None and choice == "required" and not chosen and candidates:
                unknown = [n for n in candidates if n not in _KNOWN_TOOLS]
                other = (unknown or candidates)[0]
        if other is not None:
            chosen.append(other)
        out: list[tuple[str, str]] = []
        for name in chosen:
            if name == own:
                out.append((name, orjson.dumps(task.arguments).decode()))
            else:
                out.append((name, placeholder_arguments(offered[name], task.text)))
        return out

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


def _call_id(messages: list[Message], name: str, index: int) -> str:
    """A call id derived from the conversation (deterministic, unique per step)."""
    digest = hashlib.sha256()
    for m in messages:
        digest.update(f"{m.role}\0{m.text}\0".encode())
        for call in m.tool_calls or ():
            digest.update(f"{call.id}\0".encode())
    digest.update(f"{name}\0{index}".encode())
    return "call_" + digest.hexdigest()[:24]


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
