"""Interrupts: a run pauses to ask a human (docs/human-in-the-loop.md).

Theory of operation
-------------------
An agent run asks a person in two ways: to *approve* a tool call before it
runs (spec 002 section 16.1) or to answer a *question* with a typed value.
Either is an :class:`Interrupt`; the answer is an :class:`Answer`. This
module holds the pure parts every layer shares: the two records, the check
of an answer's shape (:func:`answer_problem`), the text a model sees when a
call was refused (:func:`refusal`), the outcome of an answer
(:func:`outcome_of`) and the table of pending interrupts with its
per-principal bound (:class:`PendingTable`), which the in-memory store of
``uamp_trio.hosting.interrupts`` runs and whose rules the other stores
follow.

Ids: :attr:`Interrupt.id` is random (the host makes it) and is what a client
answers by. :attr:`Interrupt.key` is what the *run* knows the interrupt by --
the tool call id for an approval, the call id and the question's number for
a question -- so a run resumed from a checkpoint that asks again is matched
to the interrupt already pending rather than making a second one.

Time is an argument: ``now`` (seconds since the epoch) is passed in.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final, Protocol

import attrs

from .errors import UampError

__all__ = [
    "APPROVAL",
    "CAPABILITY_KEY",
    "DEFAULT_EXPIRY",
    "DEFAULT_MAX_PENDING",
    "KINDS",
    "OUTCOMES",
    "QUESTION",
    "Answer",
    "Interrupt",
    "InterruptLimitError",
    "InterruptPort",
    "PendingTable",
    "advertised",
    "answer_problem",
    "declaration",
    "interrupt_fields",
    "outcome_of",
    "refusal",
]

#: An interrupt that asks to approve a tool call.
APPROVAL: Final = "approval"
#: An interrupt that asks a question with a typed answer.
QUESTION: Final = "question"
KINDS: Final = frozenset({APPROVAL, QUESTION})

#: How an interrupt ended (``interrupt.resolved``'s ``outcome``).
OUTCOMES: Final = frozenset({"approved", "denied", "answered", "expired", "cancelled"})

#: Seconds an interrupt waits for its answer unless configured otherwise.
DEFAULT_EXPIRY: Final = 600.0
#: Interrupts one principal may have pending at once unless configured otherwise.
DEFAULT_MAX_PENDING: Final = 32


@attrs.frozen(kw_only=True)
class Interrupt:
    """A pending question to a human that pauses a run.

    Attributes:
        id: What clients answer it by (random; given by the host).
        kind: :data:`APPROVAL` or :data:`QUESTION`.
        key: What the run knows it by (see the module docstring).
        prompt: The text shown to the person.
        tool_name: For an approval: the tool to run.
        call_id: The tool call it belongs to, if any.
        arguments: For an approval: the call's arguments.
        schema: For a question: the JSON Schema of the answer.
        expires_at: When it expires (seconds since the epoch), if ever.
        agent: The agent that asks.
        session_id: The session of the paused run.
        response_id: The response that is paused.
        step_id: The step that asks (UUIDv4, spec 002 section 3.4).
    """

    id: str
    kind: str
    key: str
    prompt: str
    tool_name: str | None = None
    call_id: str | None = None
    arguments: dict[str, Any] | None = None
    schema: dict[str, Any] | None = None
    expires_at: float | None = None
    agent: str | None = None
    session_id: str | None = None
    response_id: str | None = None
    step_id: str | None = None

    def expired(self, now: float) -> bool:
        """Whether it has expired at ``now``."""
        return self.expires_at is not None and now >= self.expires_at


@attrs.frozen(kw_only=True)
class Answer:
    """A person's answer to an :class:`Interrupt`.

    Attributes:
        approved: For an approval: run the call (``True``) or refuse it.
        arguments: For an approval: edited arguments to run the call with.
        value: For a question: the answer (any JSON value).
        reason: Why, in the person's words (shown to the model on a denial).
        expired: Nobody answered in time (the run treats it as a denial).
    """

    approved: bool | None = None
    arguments: dict[str, Any] | None = None
    value: Any = None
    reason: str | None = None
    expired: bool = False

    @classmethod
    def expiry(cls) -> Answer:
        """The answer an interrupt gets when it expires."""
        return cls(approved=False, expired=True, reason="nobody answered in time")


class InterruptLimitError(UampError):
    """A principal already has the most pending interrupts allowed."""

    code = "too_many_interrupts"


def answer_problem(interrupt: Interrupt, answer: Answer) -> str | None:
    """What is wrong with ``answer`` for ``interrupt`` (``None``: it fits).

    An approval needs ``approved``; edited arguments must be an object. A
    question needs a ``value`` (its schema is checked by the run, which asks
    again when the value does not match).
    """
    if interrupt.kind == APPROVAL:
        if answer.approved is None:
            return "an approval needs approved: true or false"
        if answer.arguments is not None and not isinstance(answer.arguments, dict):
            return "edited arguments must be a JSON object"
        return None
    if answer.value is None and not answer.expired:
        return "a question needs a value"
    return None


def outcome_of(interrupt: Interrupt, answer: Answer) -> str:
    """The outcome an answer gives: approved, denied, answered or expired."""
    if answer.expired:
        return "expired"
    if interrupt.kind == APPROVAL:
        return "approved" if answer.approved else "denied"
    return "answered"


def refusal(tool_name: str, answer: Answer) -> str:
    """The tool result a model sees for a call a person did not approve."""
    if answer.expired:
        text = f"The call to {tool_name} was not run: nobody approved it in time."
    else:
        text = f"The call to {tool_name} was denied by the user and was not run."
    if answer.reason and not answer.expired:
        text += f" Reason: {answer.reason}"
    return text


@attrs.define
class _Entry:
    interrupt: Interrupt
    owner: tuple[str, str]


class PendingTable:
    """Pending interrupts by id, each owned by a principal ``(scheme, id)``.

    The rules every store follows: another principal's interrupt looks
    missing; a principal has at most ``max_pending`` pending at once
    (:class:`InterruptLimitError` past it); an expired interrupt is gone.

    Args:
        max_pending: The per-principal bound.
    """

    def __init__(self, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self.max_pending = max_pending
        self._entries: dict[str, _Entry] = {}
        self._count: dict[tuple[str, str], int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, interrupt: Interrupt, owner: tuple[str, str]) -> None:
        """Record ``interrupt`` for ``owner``.

        Raises:
            InterruptLimitError: ``owner`` has ``max_pending`` already.
            ValueError: The id is taken.
        """
        if interrupt.id in self._entries:
            raise ValueError(f"interrupt {interrupt.id!r} exists already")
        if self._count.get(owner, 0) >= self.max_pending:
            raise InterruptLimitError(
                f"too many pending interrupts (at most {self.max_pending}); answer some first"
            )
        self._entries[interrupt.id] = _Entry(interrupt, owner)
        self._count[owner] = self._count.get(owner, 0) + 1

    def get(self, interrupt_id: str, owner: tuple[str, str] | None, now: float) -> Interrupt | None:
        """The pending interrupt ``interrupt_id`` if ``owner`` may see it (``None``: anyone)."""
        entry = self._entries.get(interrupt_id)
        if entry is None or (owner is not None and entry.owner != owner):
            return None
        if entry.interrupt.expired(now):
            return None
        return entry.interrupt

    def owner_of(self, interrupt_id: str) -> tuple[str, str] | None:
        """Who owns ``interrupt_id``, if it is recorded."""
        entry = self._entries.get(interrupt_id)
        return entry.owner if entry is not None else None

    def remove(self, interrupt_id: str) -> Interrupt | None:
        """Forget ``interrupt_id``; return it if it was recorded."""
        entry = self._entries.pop(interrupt_id, None)
        if entry is None:
            return None
        left = self._count.get(entry.owner, 1) - 1
        if left:
            self._count[entry.owner] = left
        else:
            self._count.pop(entry.owner, None)
        return entry.interrupt

    def find(self, **match: Any) -> Iterator[Interrupt]:
        """Pending interrupts whose attributes equal ``match`` (e.g. ``session_id=``)."""
        for entry in list(self._entries.values()):
            it = entry.interrupt
            if all(getattr(it, k) == v for k, v in match.items()):
                yield it

    def expired(self, now: float) -> list[Interrupt]:
        """The interrupts that have expired at ``now`` (still recorded)."""
        return [e.interrupt for e in self._entries.values() if e.interrupt.expired(now)]

    def next_deadline(self) -> float | None:
        """The earliest expiry, if any."""
        times = [e.interrupt.expires_at for e in self._entries.values()]
        known = [t for t in times if t is not None]
        return min(known) if known else None


def interrupt_fields(interrupt: Interrupt) -> Mapping[str, Any]:
    """The fields of ``interrupt.request`` for ``interrupt``."""
    return {
        "interrupt_id": interrupt.id,
        "kind": interrupt.kind,
        "prompt": interrupt.prompt,
        "tool_name": interrupt.tool_name,
        "call_id": interrupt.call_id,
        "arguments": interrupt.arguments,
        "schema": interrupt.schema,
        "expires_at": interrupt.expires_at,
        "step_id": interrupt.step_id,
        "response_id": interrupt.response_id,
    }


#: Where uamp advertises interrupts in a capability declaration's ``extensions``.
CAPABILITY_KEY: Final = "interrupts"


def advertised(extensions: Mapping[str, Any] | None) -> bool:
    """Whether a (client's) capability ``extensions`` says it answers interrupts.

    A client declares ``{"extensions": {"interrupts": true}}`` (or an object
    such as the server's own declaration) in ``session.create``'s
    ``client_capabilities`` or a later ``client.capabilities``.
    """
    if not extensions:
        return False
    value = extensions.get(CAPABILITY_KEY)
    return bool(value)


def declaration(expiry: float | None) -> dict[str, Any]:
    """What a server puts under ``extensions["interrupts"]`` of its capabilities."""
    return {
        "kinds": sorted(KINDS),
        "request": "interrupt.request",
        "answer": "interrupt.answer",
        "resolved": "interrupt.resolved",
        "expires_in": expiry,
    }


class InterruptPort(Protocol):
    """How an agent asks a person from inside a response (``TurnRequest.interrupts``).

    The host's port records the interrupt, shows it to the client in the
    transport's own way, waits for the answer from any connection (or the
    expiry) and returns it.
    """

    async def ask(self, interrupt: Interrupt) -> Answer:
        """The answer to ``interrupt`` (an expiry when nobody answered in time)."""
        ...
