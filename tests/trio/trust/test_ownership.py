"""Ownership: no object crosses principals (docs/security.md, "Ownership").

A real server on 127.0.0.1 authenticates two principals, alice and bob, by
API key (a small test middleware in front of every route, as the root's
authentication gate does). Alice creates one object of every kind -- A2A
tasks (paused and running) and a context, an HTTP+SSE session, an ACP
session, a UAMP WebSocket session -- and then bob walks every operation of
every transport that names an id, once with alice's id and once with a random
id of the same shape. The two answers must be byte-identical once the ids
(and the clock) are masked, and must be the not-found answer: bob cannot tell
alice's object from one that does not exist. Afterwards alice's objects are
checked to be untouched.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl

import httpx
import orjson
import trio
from trio_websocket import WebSocketConnection
from trio_websocket import open_websocket_url as open_ws

from tests._support.rpc import a2a_message, a2a_v1_message, rpc
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio import create_app
from uamp_trio.engines.server import Server
from uamp_trio.hosting.middleware import Call, Next, Refusal, Reply
from uamp_trio.trust.auth import APIKeyAuthenticator, AuthError, bearer_token

TIMEOUT = 60
#: How long an answer may take before it counts as a stream held open (s).
STREAM_WAIT = 3
ALICE, BOB = "key-of-alice", "key-of-bob"
AGENT = "/agents/witness"
CREATE = {"type": "session.create", "uamp_version": "1.0", "session": {"modalities": ["text"]}}
TOOL = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
}


class KeyGate:
    """Test authentication: an API key (``Authorization: Bearer`` or ``?token=``)."""

    def __init__(self) -> None:
        self.keys = APIKeyAuthenticator([("alice", ALICE), ("bob", BOB)])

    async def __call__(self, call: Call, call_next: Next) -> Reply:
        if not call.route.public:
            query = dict(parse_qsl(call.request.query)).get("token")
            token = bearer_token(call.request.headers.get("authorization"), query)
            try:
                call.request.principal = await self.keys.authenticate(token)
            except AuthError as exc:
                raise Refusal(401, exc.message, code="unauthorized") from None
        return await call_next(call)


class Witness:
    """Tells who asked and how many messages it was given.

    ``wait`` in the text: works until cancelled. ``tool`` with client tools
    declared: calls the first one (the turn pauses for its result).
    """

    name = "witness"

    def capabilities(self) -> ty.Capabilities:
        return ty.Capabilities(
            id="witness", provider="test", modalities=["text"], supports_streaming=True
        )

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        last = request.messages[-1] if request.messages else None
        text = last.text if last is not None else ""
        if last is not None and last.role == "user" and "tool" in text and request.tools:
            name = request.tools[0].function.name
            await emit(ev.ToolCall(call_id="call_1", name=name, arguments="{}"))
            return
        said = f"{request.principal.id} sent {len(request.messages)} messages"
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text=said)))
        if "wait" in text:
            await trio.sleep_forever()


# --- masking: what may differ between two answers -------------------------------------

_SERVER_ID = re.compile(rb"\b[a-z]+_[0-9a-f]{32}(\.\d+)?\b")
_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_RFC3339 = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
_CLOCK = re.compile(rb'"(created_at|timestamp)":\s*\d+(\.\d+)?')


def masked(data: bytes, named: str) -> bytes:
    """``data`` with the id the caller named, fresh server ids and clock readings masked."""
    data = data.replace(named.encode(), b"<NAMED>")
    data = _SERVER_ID.sub(b"<id>", data)
    data = _UUID.sub(b"<uuid>", data)
    data = _RFC3339.sub(b"<time>", data)
    return _CLOCK.sub(rb'"\1":<clock>', data)


def random_like(known: str) -> str:
    """A random id of the same shape (prefix and length) as ``known``."""
    prefix, sep, rest = known.rpartition("_")
    return f"{prefix}{sep}{os.urandom(len(rest)).hex()[: len(rest)]}"


def http_answer(resp: httpx.Response, named: str) -> bytes:
    """Status, headers (but ``date``) and body of an HTTP answer, masked."""
    head = [f"{resp.status_code}".encode()]
    for name, value in sorted(resp.headers.items()):
        if name.lower() != "date":
            head.append(f"{name.lower()}: {value}".encode())
    return masked(b"\n".join([*head, b"", resp.content]), named)


@asynccontextmanager
async def serving() -> AsyncIterator[Server]:
    app = create_app([Witness()], middleware=[KeyGate()])
    server = Server(app, host="127.0.0.1", port=0, shutdown_grace=0.5)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()


def http_client(server: Server, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{server.port}",
        headers={"authorization": f"Bearer {key}"},
        timeout=10,
    )


@asynccontextmanager
async def two_callers() -> AsyncIterator[tuple[Server, httpx.AsyncClient, httpx.AsyncClient]]:
    """A server, and an HTTP client for Alice and one for Bob."""
    async with (
        serving() as server,
        http_client(server, ALICE) as alice,
        http_client(server, BOB) as bob,
    ):
        yield server, alice, bob


@asynccontextmanager
async def websocket(server: Server, path: str, key: str) -> AsyncIterator[WebSocketConnection]:
    url = f"ws://127.0.0.1:{server.port}{path}"
    headers = [(b"authorization", f"Bearer {key}".encode())]
    async with open_ws(url, extra_headers=headers) as ws:
        yield ws


# --- alice's objects ------------------------------------------------------------------


class Alice:
    """One object of every kind, created by alice; ``ids`` by kind.

    An operation that may create an object under the id it names (bob's
    ``session.create`` or send into a context) gets an id of its own, so the
    walk never sees bob's own object.
    """

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}

    async def create(self, http: httpx.AsyncClient, ws: WebSocketConnection) -> None:
        paused = await http.post(
            f"{AGENT}/a2a",
            json=rpc(
                "message/send",
                {"message": a2a_message("use the tool"), "metadata": {"tools": [TOOL]}},
            ),
        )
        task = paused.json()["result"]
        assert task["status"]["state"] == "input-required", task
        self.ids["task"] = task["id"]
        self.ids["context"] = task["contextId"]
        running = await http.post(
            f"{AGENT}/a2a",
            json=rpc(
                "message/send",
                {"message": a2a_message("wait"), "configuration": {"blocking": False}},
            ),
        )
        self.ids["running"] = running.json()["result"]["id"]
        done = await http.post(
            f"{AGENT}/a2a", json=rpc("message/send", {"message": a2a_message("hi")})
        )
        self.ids["done"] = done.json()["result"]["id"]
        self.ids["context2"] = done.json()["result"]["contextId"]
        created = await http.post(f"{AGENT}/events", json=CREATE)
        assert created.status_code == 200, created.text
        self.ids["sse"] = created.json()["session_id"]
        new = await http.post(
            f"{AGENT}/acp", json=rpc("session/new", {"cwd": "/home/alice", "mcpServers": []})
        )
        self.ids["acp"] = new.json()["result"]["sessionId"]
        prompt = {"sessionId": self.ids["acp"], "prompt": [{"type": "text", "text": "hello"}]}
        said = await http.post(f"{AGENT}/acp", json=rpc("session/prompt", prompt))
        assert said.json()["result"]["stopReason"] == "end_turn", said.text
        await ws.send_message(orjson.dumps(CREATE).decode())
        created_ws = orjson.loads(await ws.get_message())
        assert created_ws["type"] == "session.created"
        assert orjson.loads(await ws.get_message())["type"] == "capabilities"
        self.ids["uamp"] = created_ws["session_id"]


# --- the table: every id-bearing operation of every transport -------------------------


class Bob:
    """Bob's clients: HTTP, and one ACP and one UAMP WebSocket with a session of his own."""

    def __init__(
        self, http: httpx.AsyncClient, acp_ws: WebSocketConnection, uamp_ws: WebSocketConnection
    ) -> None:
        self.http = http
        self.acp_ws = acp_ws
        self.uamp_ws = uamp_ws

    async def acp_over_ws(self, payload: dict[str, Any]) -> bytes:
        """Send ``payload``; everything answered before a sentinel request's reply."""
        await self.acp_ws.send_message(orjson.dumps(payload).decode())
        await self.acp_ws.send_message(orjson.dumps(rpc("tools/list", {}, "sentinel")).decode())
        seen = []
        while True:
            message = await self.acp_ws.get_message()
            if orjson.loads(message).get("id") == "sentinel":
                return "\n".join(seen).encode()
            seen.append(str(message))

    async def uamp(self, event: dict[str, Any]) -> bytes:
        """Send ``event``; everything answered before the pong of a following ping."""
        await self.uamp_ws.send_message(orjson.dumps(event).decode())
        await self.uamp_ws.send_message(orjson.dumps({"type": "ping"}).decode())
        seen = []
        while True:
            message = await self.uamp_ws.get_message()
            if orjson.loads(message)["type"] == "pong":
                return "\n".join(seen).encode()
            seen.append(str(message))


Check = Callable[[bytes], None]
Operation = Callable[[Bob, str], Awaitable[bytes]]


def expect(*needles: bytes) -> Check:
    def check(answer: bytes) -> None:
        for needle in needles:
            assert needle in answer, answer

    return check


A2A_NOT_FOUND = expect(b'"code":-32001', b"was not found")
REST_NOT_FOUND = expect(b"404", b'"code":"task_not_found"')

SSE_NOT_FOUND = expect(b"404", b'"code":"unknown_session"')
ACP_NOT_FOUND = expect(b'"code":-32002')
NOTHING = expect(b"")
UAMP_NOT_FOUND = expect(b'"type":"session.error"', b'"code":"unknown_session"')


def a2a_call(method: str, params: Callable[[str], dict[str, Any]]) -> Operation:
    async def call(bob: Bob, named: str) -> bytes:
        try:
            resp = await bob.http.post(
                f"{AGENT}/a2a", json=rpc(method, params(named)), timeout=STREAM_WAIT
            )
        except httpx.ReadTimeout:  # a stream of someone's task, held open
            return b"a stream held open"
        return http_answer(resp, named)

    return call


def http_call(method: str, path: str, body: Callable[[str], Any] | None = None) -> Operation:
    async def call(bob: Bob, named: str) -> bytes:
        content = None if body is None else orjson.dumps(body(named))
        headers = {"x-session-id": named} if "{}" not in path else {}
        try:
            resp = await bob.http.request(
                method, path.format(named), content=content, headers=headers, timeout=STREAM_WAIT
            )
        except httpx.ReadTimeout:  # a stream of someone's session, held open
            return b"a stream held open"
        return http_answer(resp, named)

    return call


def acp_http(
    method: str, params: Callable[[str], dict[str, Any]], *, note: bool = False
) -> Operation:
    async def call(bob: Bob, named: str) -> bytes:
        payload = rpc(method, params(named))
        if note:
            del payload["id"]
        return http_answer(await bob.http.post(f"{AGENT}/acp", json=payload), named)

    return call


def acp_ws(
    method: str, params: Callable[[str], dict[str, Any]], *, note: bool = False
) -> Operation:
    async def call(bob: Bob, named: str) -> bytes:
        payload = rpc(method, params(named), 7)
        if note:
            del payload["id"]
        return masked(await bob.acp_over_ws(payload), named)

    return call


def uamp(event: dict[str, Any]) -> Operation:
    async def call(bob: Bob, named: str) -> bytes:
        return masked(await bob.uamp({**event, "session_id": named}), named)

    return call


def _sends_with_task_id(
    dialect: str, methods: tuple[str, ...], message: Callable[..., dict[str, Any]]
) -> list[tuple[str, str, Operation, Check]]:
    """A send naming someone's task by ``taskId``, finished or running, in one dialect."""
    return [
        (
            f"a2a {dialect} {m} with taskId ({kind})",
            kind,
            a2a_call(m, lambda t: {"message": message("more", taskId=t)}),
            A2A_NOT_FOUND,
        )
        for m in methods
        for kind in ("task", "running")
    ]


def _push(name: str) -> dict[str, Any]:
    return {"url": "http://127.0.0.1:9/hook", "id": "c1", "taskId": name}


LOAD = lambda sid: {"sessionId": sid, "cwd": "/", "mcpServers": []}  # noqa: E731
PROMPT = lambda sid: {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}  # noqa: E731
SSE_INPUT = lambda sid: {"type": "input.text", "text": "hi"}  # noqa: E731

#: (name, kind of alice's object, operation, what the not-found answer contains).
#: Operations that could create an object under the named id come last.
TABLE: list[tuple[str, str, Operation, Check]] = [
    # A2A JSON-RPC, 0.3 dialect
    *[
        (f"a2a 0.3 {m} ({kind})", kind, a2a_call(m, lambda t: {"id": t}), A2A_NOT_FOUND)
        for m in ("tasks/get", "tasks/cancel", "tasks/resubscribe")
        for kind in ("task", "running")
    ],
    *[
        (f"a2a 0.3 {m}", "task", a2a_call(m, lambda t: {"id": t, "taskId": t}), A2A_NOT_FOUND)
        for m in (
            "tasks/pushNotificationConfig/get",
            "tasks/pushNotificationConfig/list",
            "tasks/pushNotificationConfig/delete",
        )
    ],
    (
        "a2a 0.3 tasks/pushNotificationConfig/set",
        "task",
        a2a_call(
            "tasks/pushNotificationConfig/set",
            lambda t: {"taskId": t, "pushNotificationConfig": _push(t)},
        ),
        A2A_NOT_FOUND,
    ),
    *_sends_with_task_id("0.3", ("message/send", "message/stream"), a2a_message),
    # A2A JSON-RPC, 1.0 dialect
    *[
        (f"a2a 1.0 {m} ({kind})", kind, a2a_call(m, lambda t: {"id": t}), A2A_NOT_FOUND)
        for m in ("GetTask", "CancelTask", "SubscribeToTask")
        for kind in ("task", "running")
    ],
    *[
        (f"a2a 1.0 {m}", "task", a2a_call(m, lambda t: _push(t)), A2A_NOT_FOUND)
        for m in (
            "CreateTaskPushNotificationConfig",
            "GetTaskPushNotificationConfig",
            "ListTaskPushNotificationConfigs",
            "DeleteTaskPushNotificationConfig",
        )
    ],
    *_sends_with_task_id("1.0", ("SendMessage", "SendStreamingMessage"), a2a_v1_message),
    (
        "a2a 1.0 ListTasks by contextId",
        "context",
        a2a_call("ListTasks", lambda c: {"contextId": c}),
        expect(b'"tasks":[]', b'"totalSize":0'),
    ),
    (
        "a2a 1.0 ListTasks (all)",
        "context",
        a2a_call("ListTasks", lambda c: {}),
        expect(b'"tasks":[]', b'"totalSize":0'),
    ),
    # A2A REST (spec 004)
    *[
        (f"a2a REST {m} task ({kind})", kind, http_call(m, f"{AGENT}/tasks/{{}}"), REST_NOT_FOUND)
        for m in ("GET", "DELETE")
        for kind in ("task", "running")
    ],
    (
        "a2a REST POST tasks with taskId",
        "task",
        http_call(
            "POST",
            f"{AGENT}/tasks?{{}}",
            lambda t: {
                "message": {"role": "user", "parts": [{"type": "text", "text": "x"}], "taskId": t}
            },
        ),
        REST_NOT_FOUND,
    ),
    # HTTP+SSE
    *[
        (f"sse POST {path}", "sse", http_call("POST", path, lambda s: SSE_INPUT(s)), SSE_NOT_FOUND)
        for path in (f"{AGENT}/events", "/events")
    ],
    *[
        (f"sse GET {path}", "sse", http_call("GET", path), SSE_NOT_FOUND)
        for path in (f"{AGENT}/events/stream", "/events/stream")
    ],
    (
        "sse GET stream ?session_id=",
        "sse",
        http_call("GET", f"{AGENT}/events/stream?session_id={{}}"),
        SSE_NOT_FOUND,
    ),
    # ACP over HTTP and over its WebSocket
    ("acp http session/load", "acp", acp_http("session/load", LOAD), ACP_NOT_FOUND),
    ("acp http session/prompt", "acp", acp_http("session/prompt", PROMPT), ACP_NOT_FOUND),
    (
        "acp http session/cancel",
        "acp",
        acp_http("session/cancel", lambda s: {"sessionId": s}, note=True),
        expect(b"204"),
    ),
    ("acp ws session/load", "acp", acp_ws("session/load", LOAD), ACP_NOT_FOUND),
    ("acp ws session/prompt", "acp", acp_ws("session/prompt", PROMPT), ACP_NOT_FOUND),
    (
        "acp ws session/cancel",
        "acp",
        acp_ws("session/cancel", lambda s: {"sessionId": s}, note=True),
        NOTHING,
    ),
    # UAMP over WebSocket: alice's session lives on alice's connection
    *[
        (f"uamp ws {event['type']}", "uamp", uamp(event), UAMP_NOT_FOUND)
        for event in (
            {"type": "input.text", "text": "hi"},
            {"type": "response.create"},
            {"type": "response.cancel"},
            {"type": "session.update", "token": "t"},
            {"type": "capabilities.query"},
            {"type": "payment.submit", "payment": {"token": "p"}},
            {"type": "tool.result", "call_id": "call_1", "result": "r"},
            {"type": "session.end"},
        )
    ],
    # Creating under a used id opens bob's own session, as an unused id does.
    (
        "uamp ws session.create with the id",
        "uamp",
        uamp(CREATE),
        expect(b'"type":"session.created"', b'"session_id":"<NAMED>"'),
    ),
    (
        "sse session.create with the id",
        "sse",
        http_call("POST", f"{AGENT}/events?{{}}", lambda s: {**CREATE, "session_id": s}),
        expect(b"200", b"x-session-id: <NAMED>", b'"session_id":"<NAMED>"'),
    ),
    (
        "a2a 0.3 message/send with contextId",
        "context",
        a2a_call("message/send", lambda c: {"message": a2a_message("hi", contextId=c)}),
        expect(b'"contextId":"<NAMED>"', b"bob sent 1 messages", b'"state":"completed"'),
    ),
    (
        "a2a 1.0 SendMessage with contextId",
        "context2",
        a2a_call("SendMessage", lambda c: {"message": a2a_v1_message("hi", contextId=c)}),
        expect(b'"contextId":"<NAMED>"', b"bob sent 1 messages", b"TASK_STATE_COMPLETED"),
    ),
]


async def test_every_id_bearing_operation_answers_another_principal_as_not_found() -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            two_callers() as (server, alice_http, bob_http),
            websocket(server, f"{AGENT}/uamp", ALICE) as alice_ws,
            websocket(server, f"{AGENT}/uamp", BOB) as bob_ws,
            websocket(server, f"{AGENT}/acp/stream", BOB) as bob_acp,
        ):
            alice = Alice()
            await alice.create(alice_http, alice_ws)
            await bob_ws.send_message(orjson.dumps(CREATE).decode())  # bob's own session
            assert orjson.loads(await bob_ws.get_message())["type"] == "session.created"
            assert orjson.loads(await bob_ws.get_message())["type"] == "capabilities"
            bob = Bob(bob_http, bob_acp, bob_ws)
            told_apart = []
            for name, kind, operation, check in TABLE:
                named = alice.ids[kind]
                theirs = await operation(bob, named)
                unknown = await operation(bob, random_like(named))
                if theirs != unknown:
                    told_apart.append(f"{name}:\n  alice's: {theirs!r}\n  random: {unknown!r}")
                else:
                    check(theirs)
            assert not told_apart, "\n".join(told_apart)

            # Alice's objects are untouched: the paused task resumes with her
            # whole conversation, the running one still runs, the sessions answer.
            got = await alice_http.post(
                f"{AGENT}/a2a", json=rpc("tasks/get", {"id": alice.ids["running"]})
            )
            assert got.json()["result"]["status"]["state"] == "working"
            listed = await alice_http.post(f"{AGENT}/a2a", json=rpc("ListTasks", {}))
            mine = {t["id"] for t in listed.json()["result"]["tasks"]}
            assert mine == {alice.ids["task"], alice.ids["running"], alice.ids["done"]}
            resumed = await alice_http.post(
                f"{AGENT}/a2a",
                json=rpc("message/send", {"message": a2a_message("72F", taskId=alice.ids["task"])}),
            )
            result = resumed.json()["result"]
            assert result["status"]["state"] == "completed", result
            assert "alice sent 3 messages" in resumed.text
            canceled = await alice_http.post(
                f"{AGENT}/a2a", json=rpc("tasks/cancel", {"id": alice.ids["running"]})
            )
            assert canceled.json()["result"]["status"]["state"] == "canceled"
            load = await alice_http.post(
                f"{AGENT}/acp", json=rpc("session/load", LOAD(alice.ids["acp"]))
            )
            assert load.json()["result"] == {}
            sse = await alice_http.post(
                f"{AGENT}/events",
                json={"type": "ping"},
                headers={"x-session-id": alice.ids["sse"]},
            )
            assert sse.status_code == 200, sse.text
            await alice_ws.send_message(orjson.dumps({"type": "input.text", "text": "hi"}).decode())
            await alice_ws.send_message(orjson.dumps({"type": "response.create"}).decode())
            seen = []
            while not seen or seen[-1]["type"] != "response.done":
                seen.append(orjson.loads(await alice_ws.get_message()))
            assert {e.get("session_id") for e in seen} == {alice.ids["uamp"]}


async def test_sse_session_create_with_a_used_id_never_attaches() -> None:
    with trio.fail_after(TIMEOUT):
        async with two_callers() as (_, alice, bob):
            first = await alice.post(f"{AGENT}/events", json=CREATE)
            sid = first.json()["session_id"]
            again = await alice.post(f"{AGENT}/events", json={**CREATE, "session_id": sid})
            assert again.status_code == 400
            assert again.json()["error"]["code"] == "duplicate_session"
            # Bob's create under alice's id is bob's own session: his events
            # run there, and alice's session still answers her alone.
            bobs = await bob.post(f"{AGENT}/events", json={**CREATE, "session_id": sid})
            assert bobs.status_code == 200 and bobs.json()["session_id"] == sid
            turn = [{"type": "input.text", "text": "hi"}, {"type": "response.create"}]
            for client in (alice, bob):
                sent = await client.post(
                    f"{AGENT}/events", json=turn, headers={"x-session-id": sid}
                )
                assert sent.status_code == 200, sent.text
            for client in (alice, bob):
                async with client.stream(
                    "GET", f"{AGENT}/events/stream", headers={"x-session-id": sid}
                ) as resp:
                    assert resp.status_code == 200
                    body = b""
                    async for chunk in resp.aiter_raw():
                        body += chunk
                        if b"response.done" in body:
                            break
                    # One session.created each: nobody joined the other's session.
                    assert body.count(b'"type":"session.created"') == 1
                    assert body.count(b'"type":"response.done"') == 1


async def test_acp_cancel_of_another_principal_does_not_stop_the_prompt() -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving() as server,
            websocket(server, f"{AGENT}/acp/stream", ALICE) as alice,
            http_client(server, BOB) as bob,
        ):
            await alice.send_message(
                orjson.dumps(rpc("session/new", {"cwd": "/", "mcpServers": []}, 1)).decode()
            )
            sid = orjson.loads(await alice.get_message())["result"]["sessionId"]
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "wait"}]}
            await alice.send_message(orjson.dumps(rpc("session/prompt", prompt, 2)).decode())
            update = orjson.loads(await alice.get_message())
            assert update["method"] == "session/update"  # the prompt is running
            cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
            assert (await bob.post(f"{AGENT}/acp", json=cancel)).status_code == 204
            with trio.move_on_after(1):
                message = orjson.loads(await alice.get_message())
                raise AssertionError(f"bob's cancel reached alice's prompt: {message}")
            await alice.send_message(orjson.dumps({**cancel}).decode())
            while True:
                answer = orjson.loads(await alice.get_message())
                if answer.get("id") == 2:
                    break
            assert answer["result"]["stopReason"] == "cancelled"
