"""A base for the tests' scripted agents.

Most tests need an agent that does one odd thing (stalls, floods, fails half
way); the rest of the ``Responder`` protocol is the same every time. Subclass
:class:`TestAgent`, set ``name`` (and ``modalities`` or ``provider`` where the
test looks at them) and write ``respond``. :class:`Words` is the common case
of an agent that talks slowly: a few text deltas with pauses between them.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_proto.voice import CallAnswer, CallEnded, CallOffer
from uamp_trio.demo import DemoAgent


class TestAgent:
    """A ``Responder`` whose capabilities are its name, ``provider`` and ``modalities``."""

    __test__ = False  # not a test class, whatever its name says

    name: str = "test"
    provider: str = "test"
    modalities: tuple[str, ...] = ("text",)

    def capabilities(self) -> ty.Capabilities:
        """The capability declaration built from the class attributes."""
        return ty.Capabilities(
            id=self.name, provider=self.provider, modalities=list(self.modalities)
        )

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """Subclasses produce the response here."""
        raise NotImplementedError


class Recording(TestAgent):
    """A :class:`TestAgent` that keeps every request it is asked, oldest first, in ``requests``.

    Subclasses answer in :meth:`answer`.
    """

    def __init__(self) -> None:
        self.requests: list[TurnRequest] = []

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """Record ``request``, then :meth:`answer` it."""
        self.requests.append(request)
        await self.answer(request, emit)

    async def answer(self, request: TurnRequest, emit: Emit) -> None:
        """Subclasses produce the response here."""
        raise NotImplementedError


class Switchboard(DemoAgent):
    """The demo agent with a call hook: it answers an SDP offer with its own SDP.

    Every offer and every end it is told of is kept (the server may run in
    another thread: the test polls them). ``decline`` makes it refuse calls.
    """

    #: The SDP answer it gives to an offer.
    SDP = "v=0\r\no=switchboard 1 1 IN IP4 127.0.0.1\r\ns=-\r\n"

    def __init__(self, name: str = "switchboard", *, decline: str | None = None) -> None:
        super().__init__(name=name)
        self.decline = decline
        self.offers: list[CallOffer] = []
        self.ended: list[CallEnded] = []

    async def take_call(self, offer: CallOffer) -> CallAnswer:
        """Accept (with :attr:`SDP` when offered one), or decline with :attr:`decline`."""
        self.offers.append(offer)
        if self.decline is not None:
            return CallAnswer(accept=False, reason=self.decline)
        return CallAnswer(sdp=self.SDP if offer.sdp else None)

    async def call_ended(self, ended: CallEnded) -> None:
        """Keep ``ended``."""
        self.ended.append(ended)


class Words(TestAgent):
    """Says each of ``words`` as one text delta, ``pause`` seconds apart.

    A long pause keeps a response running until the test cancels or kills
    it; a short one makes the responses of many sessions overlap.
    """

    def __init__(self, name: str, *words: str, pause: float) -> None:
        self.name = name
        self.words = words
        self.pause = pause

    def how_many(self, request: TurnRequest) -> int:
        """How many of the words ``request`` gets: all of them."""
        return len(self.words)

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """The words, one delta each, with the pause between them."""
        for n, word in enumerate(self.words[: self.how_many(request)]):
            if n:
                await anyio.sleep(self.pause)  # on Trio, or asyncio under uamp_asgi
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=word)))


class Ticker(Words):
    """``tick 0 tick 1 ...``, one delta per 50 ms, 400 in all (20 s).

    For tests that kill a ``uamp serve`` process in the middle of a response
    (``--agent tests._support.agents:Ticker``). A user message that is a
    number N (or ends with one: ``@ticker 40`` in a chat room) gets N ticks
    instead: a test's turn that only has to end does not wait 20 s.
    """

    def __init__(self) -> None:
        super().__init__("ticker", *(f"tick {i} " for i in range(400)), pause=0.05)

    def how_many(self, request: TurnRequest) -> int:
        """The number the last message ends with, else all 400."""
        said = request.messages[-1].text.split() if request.messages else []
        return int(said[-1]) if said and said[-1].isdigit() else len(self.words)


class Checkpointed(TestAgent):
    """Runs a tool, checkpoints (a UAP ``checkpoint`` progress event), then ticks slowly.

    ``tick 0 `` .. ``tick 39 ``, one delta per 50 ms after the checkpoint.
    Each run of the tool appends a line to the file named by the
    ``UAMP_TEST_TOOL_RUNS`` environment variable, so a test can count them
    across processes. Called on a conversation that ends with the tool's
    result (carried on from the checkpoint after a node loss), it does not
    run the tool again: it ticks. For ``--agent tests._support.agents:Checkpointed``.
    """

    name = "checkpointed"
    ticks = 40

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """The tool round and checkpoint unless done already, then the ticks."""
        last = request.messages[-1] if request.messages else None
        if last is None or last.role != "tool":
            call = ty.ToolCallFragment(id="call_fetch", name="fetch", arguments="{}")
            await emit(ev.ResponseDelta(delta=ty.DeltaToolCall(tool_call=call)))
            with open(os.environ["UAMP_TEST_TOOL_RUNS"], "a") as runs:
                runs.write(f"{os.getpid()}\n")
            result = ty.ToolResultFragment(
                call_id="call_fetch", result="fetched", status="completed"
            )
            await emit(ev.ResponseDelta(delta=ty.DeltaToolResult(tool_result=result)))
            await emit(ev.ToolCallDone(call_id="call_fetch"))
            await emit(
                ev.Progress(
                    target="response",
                    target_id=request.response_id,
                    stage="checkpoint",
                    message="cp1",
                )
            )
        for i in range(self.ticks):
            await trio.sleep(0.05)
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"tick {i} ")))


class WorkingAgent(TestAgent):
    """Says ``working ``, then works until cancelled (its task or turn stays unfinished)."""

    name = "slow"

    def capabilities(self) -> ty.Capabilities:
        """Text, streaming."""
        return ty.Capabilities(
            id=self.name, provider=self.provider, modalities=["text"], supports_streaming=True
        )

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """One word, then wait for the cancel."""
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="working ")))
        await anyio.sleep_forever()


def run_asyncio(coro_fn: Callable[[], Coroutine[Any, Any, None]], timeout: float = 20) -> None:
    """Run an asyncio client (the SDKs that are not trio) to its end, within ``timeout``."""
    asyncio.run(asyncio.wait_for(coro_fn(), timeout))


class Stalls(TestAgent):
    """Says one word and waits until cancelled; tells a test in another thread of both.

    ``started`` is set once the word is out, ``cancelled`` when the turn is
    cancelled (threading events: the server may run in a thread of its own).
    """

    def __init__(self, name: str = "stalls") -> None:
        self.name = name
        self.started = threading.Event()
        self.cancelled = threading.Event()

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """``thinking``, then wait for the cancel."""
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="thinking")))
        self.started.set()
        try:
            await trio.sleep_forever()
        finally:
            self.cancelled.set()


#: What :class:`Marks` sets and never resets (a run's state, a user, in a context variable).
MARK: contextvars.ContextVar[str | None] = contextvars.ContextVar("test_mark", default=None)


class Marks(TestAgent):
    """Notes the :data:`MARK` it finds, then sets its own (the message's text) and answers.

    ``"slow ..."`` answers after a short pause; ``"block ..."`` answers, then
    waits until cancelled. Each response should find the default, however
    the server runs them.
    """

    name = "marks"

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str | None] = []

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        text = request.messages[-1].text
        self.found.append(MARK.get())
        MARK.set(text)
        if text.startswith("slow"):
            await trio.sleep(0.05)
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok ")))
        if text.startswith("block"):
            await trio.sleep_forever()
