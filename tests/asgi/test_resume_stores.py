"""Resume across two uamp_asgi processes sharing a SQLite file or a real Redis.

Each app runs under uvicorn in a process of its own (tests/_support/asgi_stores.py),
its event log opened with ``uamp_stores.open_event_log(WHERE)`` -- what
``uamp serve --store WHERE`` opens. Clients reach them through a small
loopback forwarder (a load balancer's part: new connections go to the process
it points at). The first process is killed with SIGKILL; the client resumes on
the second: uamp's own client over WebSocket (``auto_resume``), httpx over
HTTP+SSE (``Last-Event-ID``). Another principal naming the session is answered
exactly like a session that never existed.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.asgi_stores import STALL_AFTER
from tests._support.cli import ROOT, wait_for_line
from tests._support.wire import resume_session
from uamp_proto import types as ty
from uamp_proto.codec import from_dict
from uamp_proto.sse import SSEParser
from uamp_stores import EventLog, LogKey, open_event_log
from uamp_trio.client import connect

TIMEOUT = 60
ALICE = ("api_key", "alice")


@pytest.fixture(params=["sqlite", "redis"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The shared store: a SQLite file, or a real Redis (a fresh database each time)."""
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'sessions.db'}"
    url: str = request.getfixturevalue("redis_url")
    db = 1 + uuid.uuid4().int % 15  # tests of other files use db 0
    return f"{url.rsplit('/', 1)[0]}/{db}"


@contextmanager
def app_process(where: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """One uamp_asgi process on ``where``; yields it and its port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests._support.asgi_stores", where],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        found = wait_for_line(proc, r"serving on http://127\.0\.0\.1:(\d+)")
        yield proc, int(found.group(1))
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL: no shutdown, nothing more written to the store."""
    proc.kill()
    proc.wait(10)


class Forwarder:
    """Forwards each new loopback connection to the port :attr:`target` names now."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = 0

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, client: trio.SocketStream) -> None:
        try:
            upstream = await trio.open_tcp_stream("127.0.0.1", self.target)
        except OSError:
            await client.aclose()
            return
        async with client, upstream, trio.open_nursery() as nursery:
            nursery.start_soon(_pipe, client, upstream, nursery.cancel_scope)
            nursery.start_soon(_pipe, upstream, client, nursery.cancel_scope)


async def _pipe(src: trio.SocketStream, dst: trio.SocketStream, scope: trio.CancelScope) -> None:
    try:
        async for chunk in src:
            await dst.send_all(chunk)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        scope.cancel()  # one side ended: so does the other


@asynccontextmanager
async def forwarding(target: int) -> AsyncIterator[Forwarder]:
    forwarder = Forwarder(target)
    async with trio.open_nursery() as nursery:
        await nursery.start(forwarder.serve)
        yield forwarder
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def reader(where: str) -> AsyncIterator[EventLog]:
    """The store as the test reads it (its own connection, as a third process would)."""
    log = open_event_log(where)
    try:
        yield log
    finally:
        await log.aclose()


async def until_logged(log: EventLog, key: LogKey, event_id: str) -> None:
    """Wait until the store holds ``event_id`` (the app writes in the background)."""
    while await log.find(key, event_id) is None:
        await trio.sleep(0.02)


AUTH = [("authorization", "Bearer alice-key")]


def http_to(port: int, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    """An HTTP client of the app process on ``port``."""
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=TIMEOUT)


async def test_the_uamp_client_resumes_on_the_other_process_after_a_kill(where: str) -> None:
    with app_process(where) as (first, a), app_process(where) as (_, b):
        async with forwarding(a) as lb, reader(where) as log:
            url = f"ws://127.0.0.1:{lb.port}/agents/echo/uamp"
            with trio.fail_after(TIMEOUT):
                async with connect(url, headers=AUTH, auto_resume=True) as client:
                    session = await client.create_session()
                    one = await session.ask("one")
                    assert one.text == "You said: one (1 messages)"
                    await until_logged(log, (ALICE, session.id), session.last_event_id)
                    lb.target = b  # the balancer sends new connections to the live one
                    kill(first)
                    # What is sent into a dying connection is lost with it: the
                    # next question waits until the client has resumed on b.
                    while client.reconnects < 1:
                        await trio.sleep(0.02)
                    two = await session.ask("two")
            # The second process had the conversation from the store: 3 messages.
            assert two.text == "You said: two (3 messages)"
            assert client.reconnects == 1


async def test_a_response_its_process_died_in_ends_interrupted_on_the_other(where: str) -> None:
    with app_process(where) as (first, a), app_process(where) as (_, b):
        async with forwarding(a) as lb, reader(where) as log:
            url = f"ws://127.0.0.1:{lb.port}/agents/stall/uamp"
            with trio.fail_after(TIMEOUT):
                async with connect(url, headers=AUTH, auto_resume=True) as client:
                    session = await client.create_session()
                    stream = session.respond("go")
                    deltas: list[str] = []
                    async for event in stream:
                        if event.type == "response.delta":
                            deltas.append(event.delta.text)  # type: ignore[attr-defined]
                            if len(deltas) == STALL_AFTER:
                                key = (ALICE, session.id)
                                await until_logged(log, key, session.last_event_id)
                                while (await log.load(key)).running is None:
                                    await trio.sleep(0.02)
                                lb.target = b
                                kill(first)
                    result = stream.result
                    record = await log.load((ALICE, session.id))
    assert client.reconnects == 1
    # The resumed session named the turn as acted on: the client did not ask it again.
    assert client.resent == 0
    assert deltas == [f"d{i} " for i in range(STALL_AFTER)]
    assert result is not None and result.status == "failed"
    assert result.error is not None and result.error.code == "interrupted"
    assert result.error.details is not None
    assert result.error.details["text"] == "".join(deltas)
    # The record says nothing runs; the conversation kept the input and the partial answer.
    assert record.running is None
    history = [from_dict(ty.Message, m) for m in record.history]
    assert [(m.role, m.text) for m in history] == [("user", "go"), ("assistant", "".join(deltas))]


def _events(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(e.data) for e in SSEParser().feed(body)]


async def _stream_until(
    http: httpx.AsyncClient, sid: str, kind: str, last: str | None = None
) -> list[dict[str, Any]]:
    """Read ``sid`` 's event stream (after ``last``) until an event of type ``kind``."""
    headers = {"x-session-id": sid, **({"last-event-id": last} if last else {})}
    parser, seen = SSEParser(), []
    async with http.stream("GET", "/agents/echo/events/stream", headers=headers) as resp:
        assert resp.status_code == 200, await resp.aread()
        async for chunk in resp.aiter_raw():
            for sse in parser.feed(chunk):
                seen.append(orjson.loads(sse.data))
            if any(e["type"] == kind for e in seen):
                return seen
    raise AssertionError(f"the stream ended before {kind}: {seen}")


async def test_http_sse_resumes_on_the_other_process_after_a_kill(where: str) -> None:
    headers = {"authorization": "Bearer alice-key"}
    with app_process(where) as (first, a), app_process(where) as (_, b):
        async with reader(where) as log:
            with trio.fail_after(TIMEOUT):
                async with http_to(a, headers) as http:
                    create = {"type": "session.create", "session": {"modalities": ["text"]}}
                    sid = (await http.post("/agents/echo/events", json=create)).json()["session_id"]
                    ask = [{"type": "input.text", "text": "one"}, {"type": "response.create"}]
                    posted = await http.post(
                        "/agents/echo/events", json=ask, headers={"x-session-id": sid}
                    )
                    assert posted.status_code == 200, posted.text
                    seen = await _stream_until(http, sid, "response.done")
                await until_logged(log, (ALICE, sid), seen[-1]["event_id"])
                kill(first)
                async with http_to(b, headers) as http:
                    # After the first event: every later one again, from the store.
                    again = await _stream_until(http, sid, "response.done", seen[0]["event_id"])
                    assert [e["event_id"] for e in again] == [e["event_id"] for e in seen[1:]]
                    ask = [{"type": "input.text", "text": "two"}, {"type": "response.create"}]
                    posted = await http.post(
                        "/agents/echo/events", json=ask, headers={"x-session-id": sid}
                    )
                    assert posted.status_code == 200, posted.text
                    rest = await _stream_until(http, sid, "response.done", seen[-1]["event_id"])
    text = "".join(e["delta"]["text"] for e in rest if e["type"] == "response.delta")
    assert text == "You said: two (3 messages)"


async def test_another_principal_finds_the_session_as_a_missing_one(where: str) -> None:
    alice = {"authorization": "Bearer alice-key"}
    bob = {"authorization": "Bearer bob-key"}
    with app_process(where) as (first, a), app_process(where) as (_, b):
        async with reader(where) as log:
            with trio.fail_after(TIMEOUT):
                async with connect(
                    f"ws://127.0.0.1:{a}/agents/echo/uamp", headers=list(alice.items())
                ) as client:
                    session = await client.create_session()
                    await session.ask("secret")
                    sid, last = session.id, session.last_event_id
                await until_logged(log, (ALICE, sid), last)
                kill(first)
                refusals = []
                for name in (sid, f"{sid}x"):  # alice's session, and one that never was
                    async with open_ws(
                        f"ws://127.0.0.1:{b}/agents/echo/uamp",
                        extra_headers=[(b"authorization", b"Bearer bob-key")],
                    ) as ws:
                        refused = await resume_session(ws, name, last)
                    assert refused["type"] == "session.error", refused
                    error = refused["error"]
                    refusals.append((error["code"], error["message"].replace(name, "ID")))
                assert refusals[0] == refusals[1]
                assert refusals[0][0] == "unknown_session"
                answers = []
                async with http_to(b, bob) as http:
                    for name in (sid, f"{sid}x"):
                        got = await http.get(
                            "/agents/echo/events/stream", headers={"x-session-id": name}
                        )
                        body = got.text.replace(name, "ID")
                        answers.append((got.status_code, body))
                        posted = await http.post(
                            "/agents/echo/events",
                            json={"type": "ping"},
                            headers={"x-session-id": name},
                        )
                        answers.append((posted.status_code, posted.text.replace(name, "ID")))
                assert answers[:2] == answers[2:]
                assert answers[0][0] == 404 and "unknown_session" in answers[0][1]
                # Alice's session is still hers, untouched by bob's tries.
                record = await log.load((ALICE, sid))
                assert record.agent == "echo"


async def test_on_redis_a_live_process_takes_posts_and_another_streams_the_log(
    redis_url: str,
) -> None:
    """Without a sticky balancer: b forwards a POST to a (which serves the session) and
    streams what a logs; the session stays a's."""
    headers = {"authorization": "Bearer alice-key"}
    where = f"{redis_url.rsplit('/', 1)[0]}/{1 + uuid.uuid4().int % 15}"
    with app_process(where) as (_, a), app_process(where) as (_, b):
        async with reader(where) as log:
            with trio.fail_after(TIMEOUT):
                async with (
                    http_to(a, headers) as on_a,
                    http_to(b, headers) as on_b,
                ):
                    create = {"type": "session.create", "session": {"modalities": ["text"]}}
                    opened = await on_a.post("/agents/echo/events", json=create)
                    sid = opened.json()["session_id"]
                    seen: list[dict[str, Any]] = []
                    async with trio.open_nursery() as nursery:

                        async def watch() -> None:
                            seen.extend(await _stream_until(on_b, sid, "response.done"))

                        nursery.start_soon(watch)
                        await trio.sleep(0.5)  # the stream on b is open
                        ask = [{"type": "input.text", "text": "hi"}, {"type": "response.create"}]
                        posted = await on_b.post(
                            "/agents/echo/events", json=ask, headers={"x-session-id": sid}
                        )
                        assert posted.json() == {"session_id": sid, "accepted": 2}, posted.text
                record = await log.load((ALICE, sid))
    text = "".join(e["delta"]["text"] for e in seen if e["type"] == "response.delta")
    assert text == "You said: hi (1 messages)"
    assert record.running is None and len(record.history) == 2


def _output_text(obj: dict[str, Any]) -> str:
    return "".join(
        part["text"]
        for item in obj["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


async def test_stored_responses_outlive_their_process(where: str) -> None:
    """A stored Responses API response is found, continued and deleted on the other process."""
    alice = {"authorization": "Bearer alice-key"}
    bob = {"authorization": "Bearer bob-key"}
    path = "/agents/echo/v1/responses"
    with app_process(where) as (first, a), app_process(where) as (_, b):
        async with reader(where) as log:
            with trio.fail_after(TIMEOUT):
                async with http_to(a, alice) as http:
                    made = (await http.post(path, json={"model": "echo", "input": "one"})).json()
                rid = made["id"]
                assert _output_text(made) == "You said: one (1 messages)"
                while (await log.load((ALICE, rid))).running is not None:
                    await trio.sleep(0.02)
                kill(first)
                async with http_to(b) as http:
                    got = await http.get(f"{path}/{rid}", headers=alice)
                    assert got.status_code == 200, got.text
                    assert _output_text(got.json()) == "You said: one (1 messages)"
                    ask = {"model": "echo", "input": "two", "previous_response_id": rid}
                    two = await http.post(path, json=ask, headers=alice)
                    assert _output_text(two.json()) == "You said: two (3 messages)"
                    # Bob gets what a missing id gets.
                    theirs = await http.get(f"{path}/{rid}", headers=bob)
                    missing = await http.get(f"{path}/{rid}x", headers=bob)
                    assert theirs.status_code == missing.status_code == 404
                    assert theirs.text.replace(rid, "ID") == missing.text.replace(f"{rid}x", "ID")
                    gone = await http.delete(f"{path}/{rid}", headers=alice)
                    assert gone.json()["deleted"] is True
                    assert (await http.get(f"{path}/{rid}", headers=alice)).status_code == 404


async def test_a_question_sent_into_the_dying_connection_is_asked_again(where: str) -> None:
    """The resumed ``session.created`` names the last turn acted on (``last_request``):
    uamp's client sends again the one the dead process never saw."""
    with app_process(where) as (first, a), app_process(where) as (_, b):
        async with forwarding(a) as lb, reader(where) as log:
            url = f"ws://127.0.0.1:{lb.port}/agents/echo/uamp"
            with trio.fail_after(TIMEOUT):
                async with connect(url, headers=AUTH, auto_resume=True) as client:
                    session = await client.create_session()
                    await session.ask("one")
                    await until_logged(log, (ALICE, session.id), session.last_event_id)
                    lb.target = b
                    kill(first)
                    two = await session.ask("two")  # maybe written to the dead socket
    assert two.text == "You said: two (3 messages)"
    assert client.reconnects == 1


# --- Responses ``background: true`` across processes ----------------------------------


def _responses(port: int) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"http://127.0.0.1:{port}/agents/stall/v1",
        api_key="alice-key",
        timeout=TIMEOUT,
        max_retries=0,
        _strict_response_validation=True,
    )


def _stalled(port: int) -> tuple[str, list[Any]]:
    """A background ``stall`` response streamed from ``port`` until its deltas are out."""
    seen: list[Any] = []
    stream = _responses(port).responses.create(
        model="stall", input="go", background=True, stream=True
    )
    for event in stream:
        seen.append(event)
        if sum(e.type == "response.output_text.delta" for e in seen) == STALL_AFTER:
            break
    stream.close()
    return seen[0].response.id, seen


def test_a_background_response_its_process_died_in_ends_incomplete_on_the_other(
    where: str,
) -> None:
    with app_process(where) as (first, a), app_process(where) as (_, b):
        rid, seen = _stalled(a)
        kill(first)
        other = _responses(b)
        last = seen[-1].sequence_number
        # Followed from the other process: the rest, then its end once the
        # lost process is noticed (its heartbeat expires on Redis).
        rest = list(other.responses.retrieve(rid, stream=True, starting_after=last))
        assert rest[0].sequence_number == last + 1
        end = rest[-1]
        assert end.type == "response.incomplete"
        assert end.response.output_text == "".join(f"d{i} " for i in range(STALL_AFTER))
        assert other.responses.retrieve(rid).status == "incomplete"


def test_a_background_response_is_cancelled_from_the_other_process(redis_url: str) -> None:
    where = f"{redis_url.rsplit('/', 1)[0]}/{1 + uuid.uuid4().int % 15}"
    with app_process(where) as (_, a), app_process(where) as (_, b):
        rid, _ = _stalled(a)
        other = _responses(b)
        assert other.responses.retrieve(rid).status == "in_progress"
        assert other.responses.cancel(rid).status == "cancelled"
        assert _responses(a).responses.retrieve(rid).status == "cancelled"
        # Another principal's cancel of it is a 404, like a missing one.
        bob = openai.OpenAI(base_url=f"http://127.0.0.1:{b}/agents/stall/v1", api_key="bob-key")
        with pytest.raises(openai.NotFoundError):
            bob.responses.cancel(rid)


# --- AI SDK answers across processes (a shared Redis log) ------------------------------


def test_an_ai_sdk_answer_its_process_died_in_resumes_then_ends_interrupted(
    redis_url: str,
) -> None:
    where = f"{redis_url.rsplit('/', 1)[0]}/{1 + uuid.uuid4().int % 15}"
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]}
    chat = {"id": "chat-k", "messages": [user]}
    path = "/agents/stall/ai-sdk"
    with (
        app_process(where) as (first, a),
        app_process(where) as (_, b),
        httpx.Client(headers=dict(AUTH), timeout=TIMEOUT) as http,
    ):
        seen = b""
        with http.stream("POST", f"http://127.0.0.1:{a}{path}", json=chat) as r:
            for part in r.iter_bytes():
                seen += part
                if seen.count(b"text-delta") >= STALL_AFTER:
                    break
        kill(first)
        resumed = http.get(f"http://127.0.0.1:{b}{path}/chat-k/stream")
        after = http.get(f"http://127.0.0.1:{b}{path}/chat-k/stream")
        bob = http.get(
            f"http://127.0.0.1:{b}{path}/chat-k/stream", headers={"authorization": "Bearer bob-key"}
        )
    assert resumed.status_code == 200
    got = _ui_chunks(resumed.content)
    assert got[0] == _ui_chunks(seen)[0]  # from its start chunk
    said = "".join(c["delta"] for c in got if c["type"] == "text-delta")
    assert said == "".join(f"d{i} " for i in range(STALL_AFTER))
    assert [c["type"] for c in got][-2:] == ["error", "finish"]
    assert got[-1]["finishReason"] == "interrupted"
    assert resumed.content.endswith(b"data: [DONE]\n\n")
    assert after.status_code == 204  # the lost answer is over
    assert bob.status_code == 204


def _ui_chunks(raw: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(b[6:]) for b in raw.split(b"\n\n") if b.startswith(b"data: {")]
