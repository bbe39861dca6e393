"""What the requests of a run say: one prompt, or conversations from a dataset, over turns.

A *dataset* (``--dataset FILE``) is JSONL, one conversation a line: either
``{"prompt": "..."}`` (one user message) or ``{"messages": [{"role": "user",
"content": "..."}, ...]}`` (a whole conversation; its user messages are its
turns, in order -- the assistant messages it holds are left out, since the
replies in a benchmark are the agent's own). Without a dataset every
conversation is the one ``--prompt``.

A *conversation* runs ``--turns N`` turns (default: as many as its user
messages, so 1 for a prompt); turn ``k`` says its ``k``-th user message
(wrapping round when it has fewer). Each turn is one request, one sample.
A worker (a connection) plays its conversations one after another through
its own :class:`Script`; which conversation comes next is drawn from the
dataset by the run's :class:`Workload`, with ``random.Random(seed)``, so a
seeded run plays the same sequence of conversations.

What "the same conversation" means on the wire is each driver's business:
:attr:`Turn.thread` is its id, :attr:`Turn.history` what was said before.

*Tool workloads*: a line may also carry ``"tools"`` (client tools in Chat
Completions' form, ``{"type": "function", "function": {"name": ...}}``,
declared on the transports that take client tools), ``"tool_results"``
(``{"NAME": "text"}``: what the bench answers each client tool call with;
``ok`` by default) and ``"expected_tool_calls"`` (tool names the agent should
call during each turn; a user message of ``messages`` may carry its own).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import orjson

from .lengths import Lengths, synthetic_prompt

if TYPE_CHECKING:
    from .stats import Sample

__all__ = [
    "Conversation",
    "Script",
    "Turn",
    "Workload",
    "load_dataset",
    "parse_dataset",
    "share",
]

#: The most conversations a dataset may hold (a bench's input, not a corpus).
MAX_CONVERSATIONS = 1_000_000


@attrs.frozen
class Conversation:
    """One line of a dataset: the user messages said in turn.

    ``outputs``: the output length (words) each turn asks for, when it asks
    (the synthetic generator's, :mod:`.lengths`); ``tools``, ``tool_results``
    and ``expected`` (per turn): its tool workload (see the module docstring).
    """

    turns: tuple[str, ...]
    outputs: tuple[int, ...] | None = None
    tools: tuple[dict[str, Any], ...] = attrs.field(default=(), hash=False)
    tool_results: tuple[tuple[str, str], ...] = ()
    expected: tuple[tuple[str, ...] | None, ...] | None = None


#: What a client tool call is answered with when the dataset says nothing.
DEFAULT_TOOL_RESULT = "ok"


def _names(value: Any, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(n, str) and n for n in value):
        raise ValueError(f"{where}: 'expected_tool_calls' must be a list of tool names")
    return tuple(value)


def _tools(value: dict[str, Any], where: str) -> dict[str, Any]:
    tools = value.get("tools", [])
    if not isinstance(tools, list) or not all(
        isinstance(t, dict)
        and t.get("type") == "function"
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
        for t in tools
    ):
        raise ValueError(f"{where}: 'tools' must be a list of function tools")
    results = value.get("tool_results", {})
    if not isinstance(results, dict) or not all(isinstance(v, str) for v in results.values()):
        raise ValueError(f"{where}: 'tool_results' must map tool names to text")
    return {"tools": tuple(tools), "tool_results": tuple(sorted(results.items()))}


def _conversation(value: Any, where: str) -> Conversation:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: not a JSON object")
    tooling = _tools(value, where)
    line_expects = _names(value.get("expected_tool_calls"), where)
    if "prompt" in value:
        prompt = value["prompt"]
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(f"{where}: 'prompt' must be a non-empty string")
        return Conversation(
            (prompt,), expected=None if line_expects is None else (line_expects,), **tooling
        )
    messages = value.get("messages")
    if not isinstance(messages, list):
        raise ValueError(f"{where}: needs 'prompt' or 'messages'")
    turns, expects = [], []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValueError(f"{where}: every message needs a 'role'")
        content = message.get("content")
        if message["role"] == "user":
            if not isinstance(content, str) or not content:
                raise ValueError(f"{where}: a user message's 'content' must be a non-empty string")
            turns.append(content)
            own = _names(message.get("expected_tool_calls"), where)
            expects.append(own if own is not None else line_expects)
    if not turns:
        raise ValueError(f"{where}: no user message")
    expected = tuple(expects) if any(e is not None for e in expects) else None
    return Conversation(tuple(turns), expected=expected, **tooling)


def parse_dataset(lines: Iterable[bytes], name: str = "dataset") -> tuple[Conversation, ...]:
    """The conversations of JSONL ``lines`` (blank lines skipped).

    Raises:
        ValueError: A line that is not a conversation, no conversation, or too many.
    """
    out: list[Conversation] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{name}:{number}"
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise ValueError(f"{where}: not JSON") from None
        out.append(_conversation(value, where))
        if len(out) > MAX_CONVERSATIONS:
            raise ValueError(f"{name}: more than {MAX_CONVERSATIONS} conversations")
    if not out:
        raise ValueError(f"{name}: no conversation")
    return tuple(out)


def load_dataset(path: Path) -> tuple[Conversation, ...]:
    """:func:`parse_dataset` of a file.

    Raises:
        OSError: It cannot be read.
        ValueError: See :func:`parse_dataset`.
    """
    with path.open("rb") as lines:
        return parse_dataset(lines, str(path))


@attrs.frozen
class Turn:
    """One request's part of a conversation.

    Attributes:
        thread: The conversation's id (fresh for each conversation).
        index: Which turn (0 for the first).
        prompt: What the user says now.
        history: What was said before, as (role, text): ``user`` and ``assistant``.
        max_tokens: The output length it asks for (the synthetic generator's), if any.
        tools: The client tools it declares (Chat Completions' form).
        tool_results: What each client tool's calls are answered with, by name.
        expected: The tools the agent should call during it (``None``: no expectation).
    """

    thread: str
    index: int
    prompt: str
    history: tuple[tuple[str, str], ...] = ()
    max_tokens: int | None = None
    tools: tuple[dict[str, Any], ...] = ()
    tool_results: tuple[tuple[str, str], ...] = ()
    expected: tuple[str, ...] | None = None

    def tool_result(self, name: str) -> str:
        """What a call of client tool ``name`` is answered with."""
        return dict(self.tool_results).get(name, DEFAULT_TOOL_RESULT)

    def messages(self) -> list[dict[str, str]]:
        """The history and the prompt as chat messages (``role``/``content``)."""
        said = [{"role": role, "content": text} for role, text in self.history]
        return [*said, {"role": "user", "content": self.prompt}]


class Workload:
    """The run's conversations, drawn in turn (one per run, shared by its workers)."""

    def __init__(
        self,
        conversations: tuple[Conversation, ...],
        turns: int | None = None,
        seed: int | None = None,
        *,
        input_len: Lengths | None = None,
        output_len: Lengths | None = None,
    ) -> None:
        if not conversations:
            raise ValueError("a workload needs a conversation")
        if turns is not None and turns < 1:
            raise ValueError("--turns must be at least 1")
        self.conversations = conversations
        self.turns = turns
        self.input_len = input_len
        self.output_len = output_len
        self._rng = random.Random(seed)

    def draw(self) -> Conversation:
        """The next conversation to play (with ``--input-len``/``--output-len``: a new one)."""
        if self.input_len is not None or self.output_len is not None:
            return self._synthetic()
        if len(self.conversations) == 1:
            return self.conversations[0]
        return self._rng.choice(self.conversations)

    def script(self) -> Script:
        """A worker's own sequence of turns."""
        return Script(self)

    def _synthetic(self) -> Conversation:
        rng = self._rng
        prompts, outputs = [], []
        for _ in range(self.turns or 1):
            output = None if self.output_len is None else self.output_len.draw(rng)
            words = (self.input_len or DEFAULT_INPUT).draw(rng)
            prompts.append(synthetic_prompt(words, output, rng))
            outputs.append(output)
        asked = None if self.output_len is None else tuple(o or 0 for o in outputs)
        return Conversation(tuple(prompts), asked)


#: A synthetic prompt's words when only ``--output-len`` is given.
DEFAULT_INPUT = Lengths("const", 8)


class Script:
    """One worker's conversations: what its next request says, and what was said before."""

    def __init__(self, workload: Workload) -> None:
        self._workload = workload
        self._conversation: Conversation | None = None
        self._length = 0
        self._thread = ""
        self._index = 0
        self._history: list[tuple[str, str]] = []
        #: Conversations started so far.
        self.started = 0

    def next(self, sample: Sample | None = None) -> Turn:
        """The next turn (starting a new conversation after the last one's turns).

        ``sample``, the request that says it, is stamped with its conversation and turn.
        """
        if self._conversation is None or self._index >= self._length:
            self._conversation = self._workload.draw()
            self._length = self._workload.turns or len(self._conversation.turns)
            self._thread = uuid.uuid4().hex
            self._index = 0
            self._history = []
            self.started += 1
        chat = self._conversation
        turns, outputs, expected = chat.turns, chat.outputs, chat.expected
        turn = Turn(
            self._thread,
            self._index,
            turns[self._index % len(turns)],
            tuple(self._history),
            outputs[self._index % len(outputs)] if outputs else None,
            chat.tools,
            chat.tool_results,
            expected[self._index % len(expected)] if expected else None,
        )
        self._index += 1
        if sample is not None:
            sample.conversation, sample.turn = turn.thread, turn.index
            sample.prompt_words = len(turn.prompt.split())
            sample.output_asked = turn.max_tokens
            sample.tools_expected = None if turn.expected is None else list(turn.expected)
        return turn

    def answered(self, turn: Turn, reply: str) -> None:
        """Note the reply to ``turn`` (the history of the conversation's next turns)."""
        if turn.thread == self._thread:
            self._history += [("user", turn.prompt), ("assistant", reply)]


def share(
    conversations: tuple[Conversation, ...], parts: int, index: int, seed: int | None
) -> tuple[Conversation, ...]:
    """Generator process ``index``'s share of ``conversations`` split ``parts`` ways.

    The shares are disjoint (a conversation is played by one process only)
    and cover the dataset: every ``parts``-th conversation of the dataset
    shuffled with ``random.Random(seed)`` (in file order without a seed), so
    a seeded run gives every process the same share each time. With fewer
    conversations than processes, process ``index`` plays conversation
    ``index % len(conversations)`` (then some are played by two processes).
    """
    if parts <= 1:
        return conversations
    if len(conversations) < parts:
        return (conversations[index % len(conversations)],)
    order = list(range(len(conversations)))
    if seed is not None:
        random.Random(seed).shuffle(order)
    return tuple(conversations[k] for k in sorted(order[index::parts]))
