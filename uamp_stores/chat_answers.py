"""Resumable AI SDK chat answers, for both servers: the frames kept for replays, and the shared log.

Theory of operation
-------------------
An answer of the Vercel AI SDK transport (``POST .../ai-sdk``) does not
belong to the request that asked for it: it runs in the server's task group
and every request -- the POST that started it, the SDK's resume (``GET
.../ai-sdk/{chatId}/stream``) -- follows it like any reader. An
:class:`Answer` keeps its UI-message-stream frames back to back in one
buffer (each reader keeps its own offset; one buffer rather than an object
per frame), wakes its parked readers when frames arrive, and ends with
``[DONE]``. A reader that stops reading stops nothing but itself.

Across processes (docs/scale-out.md): when the event log is shared (Redis),
a :class:`ChatLog` writes every frame of the chat's answer to it too, under
the session id ``ai-sdk:{agent}:{chat id}`` (:func:`log_session`) of the
caller's principal, with a record naming the running answer and its
process; each frame's event id is ``{answer id}:{n}`` and the last one
``{answer id}:done``. A resume that reaches another process follows the
answer from the log as it is written (:func:`follow_log`); when the writing
process is gone the replay ends ``interrupted`` and the record says nothing
runs.

``uamp_trio.transports.ai_sdk`` and ``uamp_asgi.transports.ai_sdk`` drive
these with their own turn runners; this module is written on anyio.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import anyio

from uamp_proto.adapters.ai_sdk import DONE, Phase, StreamEncoder, frame
from uamp_proto.errors import UampError
from uamp_proto.outcome import ResponseOutcome
from uamp_proto.resume import ResumeError, ResumeStream
from uamp_proto.signing import ResponseSigner

from .event_log import EventLog, Handler, LogKey, SessionRecord, _Wakeup
from .health import StoreUnavailable

__all__ = [
    "HEARTBEAT",
    "LOG_WAIT",
    "MAX_ANSWERS",
    "MAX_ANSWER_BYTES",
    "Answer",
    "AnswerKey",
    "AnswerTask",
    "AnswerTooLarge",
    "ChatLog",
    "RunningAnswers",
    "follow_log",
    "log_session",
    "resumable",
    "too_many_answers",
]

#: Answers one principal may have running at once, read or not (a client that
#: left is noticed only at the next write): past it a new one is refused 429.
MAX_ANSWERS: Final = 8
#: The most chunk bytes one answer keeps for replays.
MAX_ANSWER_BYTES: Final = 8 * 1024 * 1024
#: A comment line is written when a stream has been quiet this long (seconds).
HEARTBEAT: Final = 15.0
#: How long a resume from the log waits for news before it checks the writer (seconds).
LOG_WAIT: Final = 1.0
#: What a quiet stream writes: how a gone client is noticed.
KEEP_ALIVE: Final = b": keep-alive\n\n"

log = logging.getLogger("uamp_stores.chat_answers")

#: An answer's key: ``(principal key, agent name, chat id)``.
AnswerKey = tuple[tuple[str, str], str, str]
#: Writes bytes of a streamed answer.
Write = Callable[[bytes], Awaitable[None]]


class Cancellable(Protocol):
    """A running turn (its driver): what :meth:`Answer.cancel` stops."""

    def cancel(self) -> None:
        """End the turn ``cancelled``."""
        ...


def log_session(agent: str, chat_id: str) -> str:
    """The event log's session id of a chat's answers."""
    return f"ai-sdk:{agent}:{chat_id}"


class Answer:
    """One answer: its frames so far (kept for replays) and what its readers wait on.

    Args:
        key: Whose chat it answers.
        leg: The answer's id (its frames' event ids in the log start with it).
        start: Its ``start`` frame.
        prefix: A continued message's earlier parts, replayed right after ``start``.
        heartbeat: A reader writes a comment after this long without frames (seconds).
    """

    def __init__(
        self,
        key: AnswerKey,
        leg: str,
        start: bytes,
        prefix: list[bytes],
        *,
        heartbeat: float = HEARTBEAT,
    ) -> None:
        self.key = key
        self.leg = leg
        #: The frames in stream order, back to back; the first is ``start``,
        #: which ends at :attr:`start_end`.
        self.buf = bytearray(start)
        self.start_end = len(start)
        self.prefix = prefix
        self.size = len(start) + sum(len(f) for f in prefix)
        self.done = False
        self.heartbeat = heartbeat
        #: Where readers wait for frames; ``waiting``: someone is parked there.
        self._lot = _Wakeup()
        self.waiting = False
        self.runner: Cancellable | None = None
        self.finished = anyio.Event()
        #: Whether the answer writes to the shared event log (until superseded there).
        self.logging = False
        #: Writes what the shared log has queued (``None``: no shared log).
        self.flush: Callable[[], Awaitable[None]] | None = None

    @property
    def start(self) -> bytes:
        """The answer's ``start`` frame."""
        return bytes(self.buf[: self.start_end])

    def push(self, frames: list[bytes]) -> None:
        """Add frames (never waits)."""
        for data in frames:
            self.push_one(data)

    def push_one(self, data: bytes) -> None:
        """Add one frame (never waits)."""
        self.buf += data
        self.size += len(data)
        if self.waiting:
            self.wake()

    def wake(self) -> None:
        """Wake the parked readers (once: at its next checkpoint they take all it added)."""
        self.waiting = False
        self._lot.unpark_all()

    def close(self) -> None:
        """No more frames."""
        self.done = True
        self._lot.unpark_all()

    def cancel(self) -> None:
        """Stop the agent (the answer ends ``abort``, ``finish``)."""
        if self.runner is not None:
            self.runner.cancel()

    async def follow(self, send: Write, *, replay: bool) -> None:
        """Write the frames from the start, then each new one, then ``[DONE]``.

        ``replay``: include a continued message's earlier parts (a resume).
        """
        sent = 0  # the offset in buf of what this reader has not sent yet
        if replay and self.prefix:
            await send(b"".join([self.start, *self.prefix]))
            sent = self.start_end
        while True:
            end = len(self.buf)
            if sent < end:
                with memoryview(self.buf) as view:  # no export left to block growth
                    batch = view[sent:end].tobytes()
                sent = end
                if self.flush is not None and self.logging:
                    # In the shared log before the client sees it: a resume
                    # on another process never shows less (docs/resume.md).
                    with contextlib.suppress(StoreUnavailable):
                        await self.flush()
                await send(batch)
                continue
            if self.done:
                await send(DONE)
                return
            self.waiting = True
            try:
                with anyio.move_on_after(self.heartbeat) as quiet:
                    await self._lot.park()
            finally:
                self.waiting = bool(self._lot)
            if quiet.cancelled_caught:
                await send(KEEP_ALIVE)


class AnswerTooLarge(UampError):
    """An answer went over its byte budget (raised in the agent, through the sink)."""


def too_many_answers(limit: int) -> str:
    """What a caller past :data:`MAX_ANSWERS` (``limit``) is told, with a 429."""
    return (
        f"At most {limit} answers may run at once for one caller; wait for one to finish, "
        "or resume it."
    )


class RunningAnswers:
    """The answers running in one process, by chat, and how many each principal started."""

    def __init__(self) -> None:
        self.answers: dict[AnswerKey, Answer] = {}
        self._per_principal: dict[tuple[str, str], int] = {}

    def started(self, owner: tuple[str, str]) -> None:
        """``owner`` started one more (it counts until :meth:`forget`)."""
        self._per_principal[owner] = self._per_principal.get(owner, 0) + 1

    def held(self, owner: tuple[str, str]) -> int:
        """How many answers ``owner`` has admitted and not yet ended, read or not.

        Whether a client still reads is no test: a server may learn that it
        left only at the stream's next write, and a silent agent writes none.
        """
        return self._per_principal.get(owner, 0)

    def forget(self, answer: Answer) -> None:
        """``answer`` ended (or paused for a person): it no longer counts."""
        if self.answers.get(answer.key) is answer:
            del self.answers[answer.key]
        owner = answer.key[0]
        left = self._per_principal.get(owner, 1) - 1
        if left > 0:
            self._per_principal[owner] = left
        else:
            self._per_principal.pop(owner, None)


class ChatLog:
    """The shared event log's copy of a chat's answers, as one process writes it.

    :meth:`open` starts the answer's log (taking it over from an older
    answer of the same chat), :meth:`append` adds a frame (never waits),
    :meth:`close` ends it with ``[DONE]`` and a record that says nothing runs.
    """

    def __init__(self, store: EventLog, key: AnswerKey) -> None:
        self.store = store
        self.lkey: LogKey = (key[0], log_session(key[1], key[2]))
        self.answer: Answer | None = None
        self._count = 0
        self._handler: Handler | None = None
        #: What the log calls when a newer answer of this process takes it over.
        self._owner: Callable[[], None] = self._lose

    def _lose(self) -> None:
        if self.answer is not None:
            self.answer.logging = False

    def open(self, answer: Answer, handler: Handler | None = None) -> None:
        """Start ``answer`` 's log (``handler`` answers what other processes ask); never waits."""
        store = self.store
        self.answer = answer
        store.take_over(self.lkey)
        record = SessionRecord(agent=answer.key[1], running=answer.leg)
        store.begin(self.lkey, record, owner=self._owner)
        answer.logging = True
        answer.flush = store.flush
        for data in [answer.start, *answer.prefix]:
            self.append(data)
        if handler is not None:
            self._handler = handler
            store.register(self.lkey, handler)

    def append(self, data: bytes) -> None:
        """Log one frame of the open answer."""
        assert self.answer is not None
        self._count += 1
        self.store.append(self.lkey, data, f"{self.answer.leg}:{self._count}")

    async def close(self) -> bool:
        """End the open answer's log (unless a newer answer took it over).

        Returns ``False`` when the store did not answer (the end stays queued).
        """
        answer, store = self.answer, self.store
        if answer is None or not answer.logging:
            return True
        if self._handler is not None:
            store.unregister(self.lkey, self._handler)
            self._handler = None
        store.append(self.lkey, DONE, f"{answer.leg}:done")
        record = SessionRecord(agent=answer.key[1], running=None)
        record.node = store.node
        store.put_record(self.lkey, record)
        store.release(self.lkey, self._owner)
        answer.logging = False
        try:
            await store.flush()
        except StoreUnavailable:
            return False
        return True


class AnswerTask:
    """What the task of one answer does to it, in either server: render, log, end once.

    A server's answer task (it runs the turn) derives from it; the rendering
    of the turn's events into chunks is the encoder's.
    """

    def __init__(
        self,
        answer: Answer,
        encoder: StreamEncoder,
        store: EventLog,
        running: RunningAnswers,
        body: bytes,
    ) -> None:
        self.answer = answer
        self.encoder = encoder
        #: The chat's answers in the shared event log (when there is one).
        self.chatlog = ChatLog(store, answer.key)
        self.running = running
        #: The request's body (what a signature covers).
        self.body = body

    def _emit(self, chunks: list[dict[str, Any]]) -> None:
        """Add chunks to the answer (and the shared log); never waits."""
        frames = [frame(c) for c in chunks]
        self.answer.push(frames)
        if self.answer.logging:
            for data in frames:
                self.chatlog.append(data)

    def _failed(self, text: str) -> list[dict[str, Any]]:
        """The chunks that end an answer with an error (none once it finished)."""
        return self.encoder.error(text) if self.encoder.phase is not Phase.FINISHED else []

    def _signed_end(
        self, outcome: ResponseOutcome, signer: ResponseSigner | None
    ) -> list[dict[str, Any]]:
        """The chunks that end an answer as ``outcome`` says, signed when completed."""
        signature = None
        if signer is not None and outcome.status == "completed":
            signature = signer(outcome.tracker.text, self.body)
        return self.encoder.end(outcome, signature)

    def _end(self, tail: list[dict[str, Any]]) -> None:
        """Add ``tail`` and end the answer (once); it no longer counts as running."""
        if self.answer.done:
            return
        self._emit(tail)
        self.answer.close()
        self.answer.finished.set()
        self.running.forget(self.answer)

    async def _close_log(self) -> None:
        if not await self.chatlog.close():
            log.warning(
                "the event log is unavailable: chat answer %s is kept queued", self.answer.leg
            )


async def follow_log(store: EventLog, send: Write, lkey: LogKey, leg: str, node: str) -> None:
    """Stream answer ``leg`` from the shared log as process ``node`` writes it."""
    stream = ResumeStream(0)
    done_id = f"{leg}:done"
    quiet = anyio.current_time()
    while True:
        entries = await store.wait(lkey, stream.cursor, timeout=LOG_WAIT)
        try:
            sent = stream.backfill(entries).send
        except ResumeError:
            lost = {"type": "error", "errorText": "The answer is no longer kept in full."}
            await send(frame(lost) + frame({"type": "finish", "finishReason": "other"}) + DONE)
            return
        frames: list[bytes] = []
        for entry in sent:
            if not entry.event_id.startswith(leg + ":"):
                return  # a newer answer took the log over: this one is gone
            if entry.event_id == done_id:
                await send(b"".join(frames) + DONE)
                return
            frames.append(entry.data)
        if frames:
            await send(b"".join(frames))
            quiet = anyio.current_time()
            continue
        if not await store.alive(node):
            lost = {"type": "error", "errorText": "The server running this answer stopped."}
            finish = {"type": "finish", "finishReason": "interrupted"}
            await send(frame(lost) + frame(finish) + DONE)
            if await store.claim(lkey, f"lost:{leg}"):
                # Nothing runs it any more: the next resume is a 204.
                done = SessionRecord(agent=lkey[1].split(":", 2)[1], running=None, node=node)
                store.put_record(lkey, done)
                with contextlib.suppress(StoreUnavailable):
                    await store.flush()
            return
        if anyio.current_time() - quiet >= HEARTBEAT:
            await send(KEEP_ALIVE)
            quiet = anyio.current_time()


async def resumable(store: EventLog, key: AnswerKey) -> tuple[LogKey, str, str] | None:
    """The log key, answer id and process of chat ``key`` 's answer running in another process.

    ``None``: the store is not shared, the chat has no answer running
    elsewhere (a lost process's too), or its start is no longer kept (no replay).
    """
    if not store.shared:
        return None
    lkey: LogKey = (key[0], log_session(key[1], key[2]))
    try:
        record = await store.load(lkey)
    except ResumeError:
        return None
    if record.running is None or record.node == store.node:
        return None  # finished (or this process's, and gone)
    if (await store.window(lkey)).first > 1:
        return None  # its start is no longer kept: no replay
    return lkey, record.running, record.node
