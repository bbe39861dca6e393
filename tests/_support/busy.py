"""An agent and helpers for the busy-conversation tests (docs/busy.md).

:class:`Holder` answers ``echo <text>``; a message starting with ``hold``
keeps its run active (after the echo) until the test sets :attr:`Holder.release`
or the run is cancelled. It records what each run saw, so a test can tell
whether an interrupted turn stayed in the conversation (``interrupt``) or
left none (``rollback``). The server may run in another thread: the records
are plain lists and the test polls them with :func:`until`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import anyio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest

from .agents import TestAgent


class Holder(TestAgent):
    """``echo <text>``; held open while ``text`` starts with ``hold`` (see the module docstring)."""

    def __init__(self, name: str = "holder") -> None:
        self.name = name
        self.release = threading.Event()
        #: The last user text of each run, in the order the runs sent their echo.
        self.started: list[str] = []
        self.finished: list[str] = []
        self.cancelled: list[str] = []
        #: Each run's conversation as ``role:text`` lines (by its last user text).
        self.seen: dict[str, list[str]] = {}

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """Echo, then hold while asked to."""
        users = [m for m in request.messages if m.role == "user"]
        text = users[-1].text if users else ""
        self.seen[text] = [f"{m.role}:{m.text}" for m in request.messages]
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"echo {text}")))
        # Recorded once the echo is out and with no await before the hold:
        # a test that waits for ``started`` knows a cancel lands in the hold.
        self.started.append(text)
        if text.startswith("hold"):
            try:
                while not self.release.is_set():
                    await anyio.sleep(0.01)  # on Trio, or asyncio under uamp_asgi
            except anyio.get_cancelled_exc_class():
                self.cancelled.append(text)
                raise
        self.finished.append(text)


def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait (polling, in any thread) until ``check()`` holds; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not come true in time")
        time.sleep(0.01)


async def until_async(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """:func:`until` for an asyncio test."""
    import asyncio

    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not come true in time")
        await asyncio.sleep(0.01)
