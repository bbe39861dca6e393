"""Three ``uamp serve`` nodes behind a real haproxy, sharing Redis and a PostgreSQL ledger.

The topology of ``deploy/compose.yaml`` without containers: each node runs in
its own working directory and shares no file with the others; Redis holds
sessions, event logs, A2A tasks and chat rooms, PostgreSQL the payment
ledger, and haproxy (the project's own ``deploy/haproxy.cfg``) spreads
connections round-robin with no stickiness.

Two hundred paid streaming conversations run through haproxy at once, on the
UAMP WebSocket (the real client, ``auto_resume``), Chat Completions, A2A
JSON-RPC (``message/stream``, then ``tasks/resubscribe`` through haproxy when its
stream breaks), chat rooms (an asker and a watcher per room) and UAMP
HTTP+SSE (a client that reconnects with ``Last-Event-ID`` as an EventSource
does; see :data:`MIX`). One node is killed with -9 mid-stream and another is
stopped with SIGTERM (``UAMP_CLUSTER_STRIKE=N``: both right after the N-th
conversation started, a harsher run in which conversations still opening
meet them). Every client gets a complete response or a documented terminal
state (``interrupted``; a Completions stream cut with its connection; a room
watcher whose own connection went reads the room's history), in order, with
no event id twice; the balance is never negative while it runs; and once the
dead node's heartbeat expired every lock is settled exactly once: each
delivered response is charged its price, the sum charged is the ledger's,
nothing is held.

A failure tells each wrong client's story: what its connections did (with
the client's port), the lines haproxy logged for those ports (which node
served each) and what the nodes logged of its session (more with
``UAMP_CLUSTER_LOG_LEVEL=info``). Every client's story is also in
``outcomes.txt`` and ``outcomes.json`` in the test's temporary folder.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import orjson
import psycopg
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
)
from trio_websocket import open_websocket_url as open_ws

from tests._support.cluster import Node
from tests._support.cluster import cluster as three_nodes
from tests._support.haproxy import check_config
from tests._support.rpc import a2a_message, rpc
from tests._support.wire import post, recv, send
from uamp_proto import events as ev
from uamp_proto.sse import SSEParser
from uamp_trio.client import connect
from uamp_trio.trust.ledger_postgres import PostgresLedger, migrate

PRICE = Decimal("0.25")
TICKS = 40  # the Ticker agent says "tick 0 " .. "tick 39 ", one per 50 ms
FULL = "".join(f"tick {i} " for i in range(TICKS))
#: Conversations per transport: 200 in all.
MIX = {"uamp-ws": 70, "uamp-sse": 40, "completions": 40, "a2a": 40, "room": 10}
AGENT = "/agents/ticker"
#: How many times a client redials through haproxy before it gives up.
REDIALS = 40
TIMEOUT = 150
#: How long one conversation may take, node loss and drain included.
PATIENCE = 60
#: How long a client waits for its response to begin before it calls it lost.
BEGIN = 20


@contextmanager
def cluster(tmp_path: Path, redis_url: str, ledger_url: str) -> Iterator[tuple[str, list[Node]]]:
    flags = (
        *("--agent", "tests._support.agents:Ticker", "--store", redis_url),
        *("--ledger", ledger_url, "--price", str(PRICE), "--ledger-heartbeat", "10"),
        *("--grace", "15", "--no-access-log"),
        *("--log-level", os.environ.get("UAMP_CLUSTER_LOG_LEVEL", "warning")),
    )
    with three_nodes(tmp_path, flags) as (url, nodes):
        yield url, nodes


def _watch_balance(ledger_url: str, stop: threading.Event, seen: list[tuple[Decimal, ...]]) -> None:
    with psycopg.connect(ledger_url, autocommit=True) as conn:
        while not stop.is_set():
            row = conn.execute("SELECT balance, locked, settled FROM accounts").fetchone()
            assert row is not None
            seen.append(tuple(row))
            time.sleep(0.02)


def test_the_shipped_haproxy_config_is_valid() -> None:
    done = check_config(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"])
    assert done.returncode == 0, done.stderr
    assert "Configuration file is valid" in done.stdout + done.stderr


@attrs.define
class Outcome:
    """How one conversation ended, as its client saw it."""

    transport: str
    #: ``completed``, ``interrupted`` (or another error code), ``cut`` (its
    #: stream ended with no terminal event, and the protocol has no resume),
    #: ``stuck`` (no end within :data:`PATIENCE`).
    state: str = "stuck"
    text: str = ""
    response_id: str | None = None
    #: The event ids it received (the UAMP transports), in order.
    ids: list[str] = attrs.field(factory=list)
    #: A chat room's id.
    room: str = ""
    #: The event types it received, in order (``d`` a delta).
    seen: list[str] = attrs.field(factory=list)
    #: Requests it made that could lock a payment (Completions retries a 502).
    attempts: int = 1
    #: What its connections did, with the wall clock and the client's port
    #: (haproxy's log names the node of each port): for a failure's story.
    notes: list[str] = attrs.field(factory=list)

    def note(self, what: str, port: int | None = None) -> None:
        now = time.time()
        stamp = time.strftime("%H:%M:%S", time.gmtime(now)) + f"{now % 1:.3f}"[1:]
        self.notes.append(f"{stamp} {what}" + (f" port={port}" if port else ""))


def _story(got: Outcome, folder: Path) -> str:
    """What ``got`` 's client did and what haproxy and the nodes logged of it."""
    lines = [f"{got.transport} {got.state} ({_wrong(got)}) attempts={got.attempts}"]
    lines += [f"  response {got.response_id} text {got.text[:24]!r}..{got.text[-12:]!r}"]
    lines += [f"  seen {[t for t in got.seen if t != 'd']} deltas={got.seen.count('d')}"]
    lines += [f"  ids {got.ids[:3]}..{got.ids[-2:]}"]
    lines += [f"  {n}" for n in got.notes]
    ports = {n.rsplit("port=", 1)[1] for n in got.notes if "port=" in n}
    balancer = folder / "haproxy.log"
    if balancer.exists():
        for line in balancer.read_text(errors="replace").splitlines():
            if any(f":{p} " in line for p in ports):
                lines.append(f"  haproxy: {line}")
    names = [n.split()[-1] for n in got.notes if n.split()[1] in ("creates", "created")]
    names += [got.response_id or "?", got.room or "?"]
    for log in sorted(folder.glob("node*/uamp.log")):
        for line in log.read_text(errors="replace").splitlines():
            if any(n in line for n in names if len(n) > 8):
                lines.append(f"  {log.parent.name}: {line[:300]}")
    return "\n".join(lines)


def _port(reply: httpx.Response) -> int | None:
    """The client's port of the connection ``reply`` came on (``None`` if unknown)."""
    stream = reply.extensions.get("network_stream")
    try:
        return int(stream.get_extra_info("client_addr")[1]) if stream is not None else None
    except Exception:
        return None


async def _bounded(conversation: Callable[[], Awaitable[None]]) -> None:
    """``conversation``, given up after :data:`PATIENCE` (its outcome stays ``stuck``)."""
    with trio.move_on_after(PATIENCE):
        await conversation()


async def _uamp_ws(url: str, token: str, out: list[Outcome]) -> None:
    got = Outcome("uamp-ws")
    out.append(got)
    ws_url = url.replace("http://", "ws://") + f"{AGENT}/uamp"
    async with connect(ws_url, auto_resume=True, resume_for=60) as client:
        got.note("ws dialled", _ws_port(client))
        try:
            await _uamp_ws_turn(client, token, got)
        finally:
            # A turn the server never acted on is sent again after a redial.
            got.attempts += client.resent
            got.note(
                f"ws ends: {client.reconnects} redial(s), {client.resent} resent", _ws_port(client)
            )


def _ws_port(client: Any) -> int | None:
    """The client's port of the UAMP client's current connection."""
    try:
        return int(client._stream.socket.getsockname()[1])
    except Exception:
        return None


async def _uamp_ws_turn(client: Any, token: str, got: Outcome) -> None:
    sid = "sess_" + os.urandom(12).hex()
    got.note(f"creates {sid}")
    session = await client.create_session(payment_token=token, session_id=sid)
    got.note("created")
    async for event in session.respond(str(TICKS)):
        if event.event_id is not None:
            got.ids.append(event.event_id)
        got.seen.append(event.type if event.type != "response.delta" else "d")
        if isinstance(event, ev.ResponseCreated):
            got.response_id = event.response_id
        elif isinstance(event, ev.ResponseDelta):
            got.text += getattr(event.delta, "text", "") or ""
        elif isinstance(event, ev.ResponseDone):
            got.state = "completed"
            got.response_id = got.response_id or event.response_id or event.response.id
        elif isinstance(event, ev.ResponseErrorEvent):
            got.state = event.error.code


async def _uamp_sse(http: httpx.AsyncClient, token: str, out: list[Outcome]) -> None:
    got = Outcome("uamp-sse", attempts=0)  # counted per POST of its turn
    out.append(got)
    path = f"{AGENT}/events"
    create = {"type": "session.create", "session": {}, "payment_token": token}
    created = await _retry_post(http, create, None, path, got)
    sid = created.json()["session_id"]
    got.note(f"created {sid}")
    turn = [
        {"type": "input.text", "session_id": sid, "text": str(TICKS)},
        {"type": "response.create", "session_id": sid},
    ]
    posted, lost, last = False, False, None
    for _ in range(REDIALS):
        headers = {"x-session-id": sid, **({"last-event-id": last} if last else {})}
        try:
            async with http.stream("GET", f"{path}/stream", headers=headers) as reply:
                said = "" if reply.status_code == 200 else (await reply.aread())[:120].decode()
                got.note(f"GET stream {reply.status_code} after {last} {said}", _port(reply))
                if reply.status_code != 200:
                    await trio.sleep(0.25)
                    continue
                if not posted or lost:
                    # A turn POSTed to a node that died before the response began
                    # is lost with it (docs/scale-out.md, "Limits"): send it again.
                    await _retry_post(http, turn, sid, path, got, running_ok=posted)
                    posted, lost = True, False
                parser = SSEParser()
                began = trio.current_time()
                async for chunk in _chunks(reply, lambda: got.response_id is None):
                    for sse in parser.feed(chunk):
                        event = orjson.loads(sse.data)
                        last = sse.id or last
                        got.ids.append(event["event_id"])
                        kind = event["type"]
                        got.seen.append(kind if kind != "response.delta" else "d")
                        if kind == "response.created":
                            got.response_id = event["response_id"]
                        elif kind == "response.delta":
                            got.text += event["delta"].get("text", "")
                        elif kind == "response.done":
                            got.state = "completed"
                            return
                        elif kind == "response.error":
                            got.state = event["error"]["code"]
                            return
                        elif kind == "payment.required":
                            # A session adopted from a lost node does not know the
                            # token (docs/scale-out.md, "Limits"): pay, as a client
                            # answering payment.required does; the turn then runs.
                            pay = {"scheme": "token", "token": token}
                            submit = {"type": "payment.submit", "session_id": sid, "payment": pay}
                            got.note("payment.required")
                            await _retry_post(http, submit, sid, path, got)
                # No response began within BEGIN seconds of the stream: lost.
                lost = got.response_id is None and trio.current_time() - began >= BEGIN
                got.note("stream ends" + (": nothing began, lost" if lost else ""))
        except httpx.HTTPError as exc:
            got.note(f"stream broke: {exc!r}")
        await trio.sleep(0.25)  # its node went: an EventSource reconnects


async def _chunks(reply: httpx.Response, waiting: Callable[[], bool]) -> AsyncIterator[bytes]:
    """``reply`` 's body; ends quietly when ``waiting()`` holds :data:`BEGIN` s after it began.

    Heartbeat comments do not count: a stream that shows nothing but them
    for that long shows no response.
    """
    chunks = reply.aiter_raw()
    began = trio.current_time()
    while True:
        until = began + BEGIN if waiting() else trio.current_time() + PATIENCE
        with trio.move_on_at(until) as waited:
            try:
                chunk = await chunks.__anext__()
            except StopAsyncIteration:
                return
        if waited.cancelled_caught:
            return
        yield chunk


async def _retry_post(
    http: httpx.AsyncClient,
    body: Any,
    sid: str | None,
    path: str,
    got: Outcome,
    *,
    running_ok: bool = False,
) -> httpx.Response:
    """POST through haproxy until a live, serving node takes it.

    ``running_ok``: a turn sent again whose first sending runs after all
    (400 ``response_in_progress``) is taken too: the stream shows it.
    """
    for _ in range(REDIALS):
        kind = (body[-1] if isinstance(body, list) else body)["type"]
        # A turn POSTed again (its answer lost with its node) may run twice.
        got.attempts += int(kind == "response.create")
        try:
            reply = await post(http, body, sid, path=path)
            got.note(f"POST {kind} {reply.status_code} {reply.text[:80]}", _port(reply))
        except httpx.HTTPError as exc:
            got.note(f"POST {kind} broke: {exc!r}")
            reply = None
        if reply is not None and reply.status_code == 200:
            return reply
        if running_ok and reply is not None and "response_in_progress" in reply.text:
            return reply
        await trio.sleep(0.25)
    said = None if reply is None else (reply.status_code, reply.text)
    raise AssertionError(f"no node took {body!r}: {said}")


async def _completions(http: httpx.AsyncClient, token: str, out: list[Outcome]) -> None:
    got = Outcome("completions", attempts=0)
    out.append(got)
    body = {"stream": True, "messages": [{"role": "user", "content": str(TICKS)}]}
    headers = {"X-PAYMENT": token}
    for _ in range(REDIALS):
        got.attempts += 1
        try:
            async with http.stream(
                "POST", f"{AGENT}/chat/completions", json=body, headers=headers
            ) as reply:
                if reply.status_code in (502, 503):  # its node went before answering:
                    await trio.sleep(0.25)  # retried, as the OpenAI SDK does
                    continue
                assert reply.status_code == 200, await reply.aread()
                async for line in reply.aiter_lines():
                    if line == "data: [DONE]":
                        got.state = "completed"
                    elif line.startswith("data: "):
                        chunk = orjson.loads(line[6:])
                        if "error" in chunk:  # the stream's own end, in OpenAI's shape
                            got.state = str(chunk["error"].get("code"))
                            continue
                        if "choices" not in chunk:
                            continue  # the payment balance after the answer (spec 004)
                        got.response_id = chunk["id"]
                        for choice in chunk["choices"]:
                            got.text += choice["delta"].get("content") or ""
        except (httpx.RemoteProtocolError, httpx.ReadError):
            got.state = "cut"  # with its connection, mid-stream: Chat Completions has no resume
        return


async def _a2a(http: httpx.AsyncClient, token: str, n: int, out: list[Outcome]) -> None:
    got = Outcome("a2a")
    out.append(got)
    send_body = rpc("message/stream", {"message": a2a_message(str(TICKS), messageId=f"m-{n}")})
    headers = {"X-PAYMENT": token}
    for _ in range(REDIALS):
        task_id = got.response_id
        body = send_body if task_id is None else rpc("tasks/resubscribe", {"id": task_id})
        try:
            async with http.stream("POST", f"{AGENT}/a2a", json=body, headers=headers) as reply:
                if reply.status_code == 200 and await _a2a_stream(reply, got):
                    return
        except httpx.HTTPError:
            pass  # its node went: resubscribe through haproxy
        if got.response_id is not None and await _a2a_get(http, headers, got.response_id, got):
            return  # it ended meanwhile
        await trio.sleep(0.25)


async def _a2a_stream(reply: httpx.Response, got: Outcome) -> bool:
    """Read an A2A SSE stream into ``got``; whether the task ended."""
    parser = SSEParser()
    async for chunk in reply.aiter_raw():
        for sse in parser.feed(chunk):
            message = orjson.loads(sse.data)
            if "error" in message:
                return False  # e.g. a resubscription to a task that ended meanwhile
            if _a2a_result(got, message["result"]):
                return True
    return False


def _a2a_result(got: Outcome, result: dict[str, Any]) -> bool:
    """Apply one streamed A2A 0.3 result; whether the task ended."""
    kind = result.get("kind")
    if kind == "task":
        got.response_id = result["id"]
        got.text = _artifact_text(result)  # the snapshot: what was streamed so far
    elif kind == "artifact-update":
        parts = result["artifact"]["parts"]
        got.text += "".join(p.get("text", "") for p in parts)
    elif kind == "status-update" and result.get("final"):
        got.state = _a2a_state(result["status"])
        return True
    return False


def _artifact_text(task: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for a in task.get("artifacts") or [] for p in a["parts"])


def _a2a_state(status: dict[str, Any]) -> str:
    state = status["state"]
    if state == "failed":
        return str((status.get("message") or {}).get("metadata", {}).get("code", "failed"))
    return str(state)


async def _a2a_get(
    http: httpx.AsyncClient, headers: dict[str, str], task_id: str, got: Outcome
) -> bool:
    """``tasks/get`` through haproxy; whether the task has ended (``got`` updated then)."""
    try:
        reply = await http.post(
            f"{AGENT}/a2a", json=rpc("tasks/get", {"id": task_id}), headers=headers
        )
    except httpx.HTTPError:
        return False
    if reply.status_code != 200 or "result" not in reply.json():
        return False
    task = reply.json()["result"]
    if task["status"]["state"] not in ("completed", "failed", "canceled"):
        return False
    got.state, got.text = _a2a_state(task["status"]), _artifact_text(task)
    return True


async def _room(url: str, token: str, n: int, out: list[Outcome]) -> None:
    """An asker and a watcher in one room; the watcher's view is the outcome."""
    room = f"room-{n}"
    got = Outcome("room", room=room)
    out.append(got)
    ws_url = url.replace("http://", "ws://") + f"{AGENT}/uamp"
    try:
        async with _dial_ws(ws_url) as watcher, _dial_ws(ws_url) as asker:
            await _join(watcher, room, "watcher")
            sid = await _join(asker, room, "asker", payment_token=token)
            await send(asker, type="input.text", text=f"@ticker {TICKS}", session_id=sid)
            while True:
                with trio.move_on_after(BEGIN) as waited:
                    event = await recv(watcher)
                if waited.cancelled_caught:
                    # The asker's node went before the agent began, or with the
                    # answer's end: the room's history tells (below).
                    got.state = "cut"
                    return
                if event.get("sender", {}).get("id") != "ticker":
                    continue
                if event["type"] == "response.created":
                    got.response_id = event["response_id"]
                elif event["type"] == "response.delta":
                    got.text += event["delta"].get("text", "")
                elif event["type"] == "response.done":
                    got.state = "completed"
                    return
                elif event["type"] == "response.error":
                    got.state = event["error"]["code"]
                    return
    except ConnectionClosed:
        got.state = "cut"  # the watcher's own node went: the room's history tells (below)


@asynccontextmanager
async def _dial_ws(url: str) -> AsyncIterator[WebSocketConnection]:
    """A WebSocket through haproxy, dialled again while no node answers (a browser's
    chat reconnects so): haproxy's 502 for a node killed mid-handshake, or a 503."""
    async with AsyncExitStack() as stack:
        for attempt in range(REDIALS):
            try:
                ws = await stack.enter_async_context(open_ws(url))
                break
            except (ConnectionRejected, HandshakeError, OSError):
                if attempt == REDIALS - 1:
                    raise
                await trio.sleep(0.25)
        yield ws


async def _join(ws: Any, room: str, name: str, **extra: Any) -> str:
    chat = {"username": name}
    await send(
        ws,
        type="session.create",
        uamp_version="1.0",
        chat=room,
        session={"modalities": ["text"], "extensions": {"chat": chat}},
        **extra,
    )
    while True:
        event = await recv(ws)
        if event["type"] == "session.created":
            return str(event["session_id"])
        assert event["type"] != "session.error", event


async def _room_history(url: str, room: str) -> list[str]:
    """The ticker's messages a newcomer to ``room`` is told of."""
    ws_url = url.replace("http://", "ws://") + f"{AGENT}/uamp"
    said: list[str] = []
    async with _dial_ws(ws_url) as ws:
        await _join(ws, room, "auditor")
        with trio.move_on_after(1.5):
            while True:
                event = await recv(ws)
                if event["type"] == "message.created" and event["sender"]["id"] == "ticker":
                    said.append(event["message"]["content"])
    return said


def _ledger_story(rows: list[dict[str, Any]], out: list[Outcome]) -> str:
    """The ledger's rows no client names, and the attempts per transport."""
    named = {o.response_id for o in out}
    strays = [(r["response_id"], r["charged"]) for r in rows if r["response_id"] not in named]
    tried = Counter[str]()
    for o in out:
        tried[o.transport] += o.attempts
    return f"{len(rows)} rows, attempts {dict(tried)}; rows no client names: {strays[:40]}"


def _wrong(got: Outcome) -> str | None:
    """What is wrong with how ``got`` ended (``None``: nothing)."""
    if got.state == "stuck":
        return "stuck"
    if not FULL.startswith(got.text):
        return "a gap or a repeat in its text"
    if got.state not in {"completed", "interrupted", "cut"}:
        return f"ended {got.state}"
    if got.state == "completed" and got.text != FULL:
        return "completed with part of the text"
    if len(got.ids) != len(set(got.ids)):
        return "an event id twice"
    if got.transport in ("uamp-ws", "uamp-sse") and got.state == "cut":
        return "cut, though it resumes"  # both resume: never left without an end
    return None


async def test_two_hundred_paid_conversations_on_five_transports_survive_a_kill_and_a_drain(
    tmp_path: Path, redis_url: str, postgres_url: str
) -> None:
    migrate(postgres_url)
    with PostgresLedger(postgres_url) as book:
        token = book.issue("100", "USD")
    stop, seen = threading.Event(), list[tuple[Decimal, ...]]()
    watcher = threading.Thread(target=_watch_balance, args=(postgres_url, stop, seen))
    watcher.start()
    out: list[Outcome] = []
    try:
        with cluster(tmp_path, redis_url, postgres_url) as (url, nodes):
            limits = httpx.Limits(max_connections=400, max_keepalive_connections=400)
            async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as http:
                starts: list[Callable[[], Awaitable[None]]] = [
                    *(partial(_uamp_ws, url, token, out) for _ in range(MIX["uamp-ws"])),
                    *(partial(_uamp_sse, http, token, out) for _ in range(MIX["uamp-sse"])),
                    *(partial(_completions, http, token, out) for _ in range(MIX["completions"])),
                    *(partial(_a2a, http, token, i, out) for i in range(MIX["a2a"])),
                    *(partial(_room, url, token, i, out) for i in range(MIX["room"])),
                ]
                random.Random(7).shuffle(starts)
                # UAMP_CLUSTER_STRIKE=N: the node loss comes after N starts
                # (a harsher run: conversations still opening meet it).
                strike = int(os.environ.get("UAMP_CLUSTER_STRIKE", len(starts)))
                with trio.fail_after(TIMEOUT):
                    async with trio.open_nursery() as nursery:
                        for n, start in enumerate(starts):
                            if n == strike:
                                nodes[0].proc.kill()
                                nodes[1].drain()
                            nursery.start_soon(_bounded, start)
                            await trio.sleep(0.005)
                        if strike >= len(starts):
                            await trio.sleep(0.5)  # most responses are streaming now
                            nodes[0].proc.kill()  # kill -9: no goodbye
                            nodes[1].drain()  # SIGTERM: graceful drain
                    # A watcher whose own node went reads what its room kept.
                    for got in out:
                        if got.transport == "room" and got.state == "cut":
                            said = await _room_history(url, got.room)
                            assert said in ([], [FULL]), said
                            got.state, got.text = ("completed", FULL) if said else ("cut", "")
            assert nodes[1].proc.wait(20) == 0  # drained and exited cleanly
    finally:
        stop.set()
        watcher.join()

    # Every client got a complete response or a documented terminal state,
    # in order, nothing twice, no gap.
    assert Counter(o.transport for o in out) == MIX
    (tmp_path / "outcomes.txt").write_text("\n\n".join(_story(o, tmp_path) for o in out))
    (tmp_path / "outcomes.json").write_bytes(orjson.dumps([attrs.asdict(o) for o in out]))
    wrong = [o for o in out if _wrong(o)]
    assert not wrong, "\n\n".join(_story(o, tmp_path) for o in wrong[:12])
    completed = [o for o in out if o.state == "completed"]
    assert len(completed) >= len(out) // 2, Counter((o.transport, o.state) for o in out)
    # The balance was never negative and the sums always held.
    assert seen
    for balance, locked, settled in seen:
        assert balance >= 0 and locked >= 0 and balance + locked + settled == Decimal(100)

    # Once the killed node's heartbeat is stale, its locks are settled by a
    # survivor: each response charged once, at most its price, none held.
    with PostgresLedger(postgres_url, heartbeat=10) as book:
        deadline = time.monotonic() + 40
        while book.show(token).account.locked and time.monotonic() < deadline:
            book.recover()
            time.sleep(0.5)
        account = book.show(token).account
        rows = book.entries(token)
    assert account.locked == 0 and all(r["state"] == "settled" for r in rows)
    ids = [r["response_id"] for r in rows]
    assert len(ids) == len(set(ids))  # locked once per response
    charged = [Decimal(r["charged"]) for r in rows]
    assert all(c in (0, PRICE) for c in charged)
    assert account.settled == sum(charged) and account.balance == Decimal(100) - sum(charged)
    # A request locks once at most.
    assert len(rows) <= sum(o.attempts for o in out), _ledger_story(rows, out)
    by_id = {r["response_id"]: Decimal(r["charged"]) for r in rows}
    for got in completed:
        # A room watcher that read the answer from the room's history knows no id.
        if got.transport in ("uamp-ws", "uamp-sse", "room") and got.response_id is not None:
            near = [(k, v) for k, v in by_id.items() if got.response_id[-12:] in k]
            assert by_id.get(got.response_id) == PRICE, (
                got.response_id,
                near,
                [t for t in got.seen if t != "d"],
                got.seen.count("d"),
            )
    # Every delivered response was paid (Completions and A2A name theirs their own way).
    assert sum(1 for c in charged if c == PRICE) >= len(completed)
