"""Every JSON entry point, fuzzed with hypothesis against a real server on 127.0.0.1.

Each transport's routes get generated bodies (shaped like the protocol's,
with anything in any slot, plus bytes that are not JSON) and WebSocket
events: the server never answers 5xx, never logs an error or a traceback,
always answers in the transport's own error format, and a WebSocket keeps
working after a bad event (a sync message after each example must be
answered). The suite runs a few thousand examples; ``UAMP_FUZZ_LONG=1``
runs a hundred times as many.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests._support import fuzz
from uamp_proto.sse import SSEParser
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent

AGENT = "fz"
FUZZ = settings(
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
    database=None,
)


def fuzzing(count: int) -> settings:
    """:data:`FUZZ` with ``count`` examples (a hundred times more in the long run)."""
    return settings(FUZZ, max_examples=fuzz.examples(count))


class Recorder(logging.Handler):
    """Every log record at WARNING or above, and any carrying a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def failures(self) -> list[str]:
        formatter = logging.Formatter("%(name)s %(levelname)s: %(message)s")
        return [
            formatter.format(r) for r in self.records if r.levelno >= logging.ERROR or r.exc_info
        ]


@pytest.fixture
def served(thread_server: Callable[..., Any]) -> Iterator[str]:
    """A real server hosting the demo agent as ``fz``, its base URL; its log is checked after."""
    recorder = Recorder()
    root = logging.getLogger()
    root.addHandler(recorder)
    old = root.level
    root.setLevel(logging.INFO)
    logging.getLogger("uamp_trio.server").info("fuzz: recording")
    try:
        server = thread_server(create_app([DemoAgent(AGENT)]))
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=15) as client:
            CLIENTS.append(client)
            yield f"http://127.0.0.1:{server.port}"
            CLIENTS.remove(client)
    finally:
        root.removeHandler(recorder)
        root.setLevel(old)
    # The server's loggers reach the recorder (a record of theirs, sent here).
    assert any(r.getMessage() == "fuzz: recording" for r in recorder.records)
    assert recorder.failures() == []


#: The keep-alive client of the test's server (one at a time).
CLIENTS: list[httpx.Client] = []


def body(value: Any) -> bytes:
    # The standard library writes integers of any size (orjson stops at 64 bits).
    return value if isinstance(value, bytes) else json.dumps(value).encode()


def bodies(shape: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """Encoded bodies: mostly the protocol's shape, some broken JSON."""
    return st.one_of(shape.map(body), shape.map(body), shape.map(body), fuzz.broken_json)


# --- answers in each transport's format --------------------------------------------------------


def check_openai_error(obj: Any) -> None:
    assert isinstance(obj, dict) and isinstance(obj.get("error"), dict), obj
    assert isinstance(obj["error"].get("message"), str), obj


def check_jsonrpc(obj: Any) -> None:
    if isinstance(obj, list):  # the answer to a batch
        assert obj, obj
        for item in obj:
            check_jsonrpc(item)
        return
    assert isinstance(obj, dict) and obj.get("jsonrpc") == "2.0", obj
    if "error" in obj:
        assert isinstance(obj["error"].get("code"), int), obj
        assert isinstance(obj["error"].get("message"), str), obj
    else:
        assert "result" in obj or "method" in obj, obj


def check_stream(text: str, check: Callable[[Any], None] | None) -> None:
    """Every SSE event of a streamed answer is JSON (or Completions' ``[DONE]``)."""
    for event in SSEParser().feed(text.encode()):
        if event.data == "[DONE]":
            continue
        obj = orjson.loads(event.data)
        if check is not None:
            check(obj)


def check_http(resp: httpx.Response, style: str) -> None:
    """The answer is not a server error and is in ``style``'s format."""
    assert resp.status_code < 500, (resp.status_code, resp.text[:500])
    ctype = resp.headers.get("content-type", "")
    if "text/event-stream" in ctype:
        assert resp.status_code == 200
        check_stream(resp.text, check_jsonrpc if style == "jsonrpc" else None)
        return
    if resp.status_code in (202, 204) and not resp.content:
        return
    obj = resp.json()
    if style == "jsonrpc":
        check_jsonrpc(obj)
    elif resp.status_code >= 400:
        check_openai_error(obj)  # OpenAI's shape; UAMP over HTTP adds "accepted"


def post(path: str, data: bytes, **headers: str) -> httpx.Response:
    return CLIENTS[-1].post(
        path, content=data, headers={"content-type": "application/json", **headers}
    )


# --- HTTP routes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "shape", "style", "count"),
    [
        ("/agents/fz/chat/completions", fuzz.completions_body, "openai", 300),
        ("/v1/chat/completions", fuzz.completions_body, "openai", 100),
        ("/agents/fz/a2a", fuzz.a2a_rpc, "jsonrpc", 300),
        ("/agents/fz/tasks", fuzz.a2a_params, "openai", 150),
        ("/agents/fz/acp", fuzz.acp_rpc, "jsonrpc", 250),
        ("/agents/fz/agui", fuzz.agui_body, "openai", 250),
        ("/agents/fz/events", fuzz.uamp_event | st.lists(fuzz.uamp_event, max_size=3), "uamp", 200),
    ],
    ids=[
        "completions",
        "completions-root",
        "a2a-jsonrpc",
        "a2a-rest",
        "acp-http",
        "agui",
        "sse-events",
    ],
)
def test_http_json_routes(served: str, path: str, shape: Any, style: str, count: int) -> None:

    @fuzzing(count)
    @given(bodies(shape))
    def run(data: bytes) -> None:
        check_http(post(path, data), style)

    run()


def test_sse_events_into_a_live_session(served: str) -> None:
    create = orjson.dumps(
        {"type": "session.create", "uamp_version": "1.0", "session": {"modalities": ["text"]}}
    )
    session = [post("/agents/fz/events", create).json()["session_id"]]

    @fuzzing(200)
    @given(bodies(fuzz.uamp_event | st.lists(fuzz.uamp_event, max_size=3)))
    def run(data: bytes) -> None:
        resp = post("/agents/fz/events", data, **{"x-session-id": session[0]})
        check_http(resp, "uamp")
        if resp.status_code == 404:  # the example ended the session: open another
            session[0] = post("/agents/fz/events", create).json()["session_id"]

    run()


@fuzzing(100)
# "." and ".." are dot segments: the client removes them (RFC 3986 section 5.2.4).
@given(
    task_id=st.text(min_size=1, max_size=30).filter(lambda t: t not in (".", "..")),
    method=st.sampled_from(["GET", "DELETE"]),
)
def test_task_and_model_routes_with_any_id(served: str, task_id: str, method: str) -> None:
    client = CLIENTS[-1]
    resp = client.request(method, f"/agents/fz/tasks/{quote(task_id, safe='')}")
    check_http(resp, "openai")
    assert resp.status_code in (200, 404), resp.text
    models = client.get(f"/agents/{quote(task_id, safe='')}/v1/models")
    check_http(models, "openai")
    assert models.status_code in (200, 404), models.text


# --- WebSockets ---------------------------------------------------------------------------------


class Socket:
    """A WebSocket that reconnects (running ``opening``) when the server closed it."""

    def __init__(self, url: str, opening: Callable[[ClientConnection], None]) -> None:
        self.url = url
        self.opening = opening
        self.ws: ClientConnection | None = None
        self.closes: list[int | None] = []
        self.stack = contextlib.ExitStack()

    def get(self) -> ClientConnection:
        if self.ws is None:
            # No keepalive pings: under load the client's own 20 s ping timeout
            # failed a long run (its 1011 is not the server's); each example's
            # sync message already proves the socket answers.
            self.ws = self.stack.enter_context(
                connect(self.url, open_timeout=10, max_size=None, ping_interval=None)
            )
            self.opening(self.ws)
        return self.ws

    def exchange(self, data: bytes, sync: bytes, done: Callable[[Any], bool]) -> list[Any]:
        """Send ``data`` then ``sync``; every message up to the one ``done`` accepts."""
        ws = self.get()
        got: list[Any] = []
        try:
            ws.send(data.decode("utf-8", "replace"))
            ws.send(sync.decode())
            while True:
                obj = orjson.loads(ws.recv(timeout=15))
                got.append(obj)
                if done(obj):
                    return got
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            self.closes.append(code)
            self.ws = None
            # A close for a bad message is the spec's answer, never 1011.
            assert code in (1000, 1002, 1003, 1007, 1008, 1009), code
            return got

    def close(self) -> None:
        self.stack.close()


def check_event(obj: Any) -> None:
    """A UAMP or Realtime event: an object with a type; errors say what went wrong."""
    assert isinstance(obj, dict) and isinstance(obj.get("type"), str), obj
    if obj["type"] in ("error", "session.error", "response.error", "system.error"):
        assert isinstance(obj.get("error"), dict), obj
        assert isinstance(obj["error"].get("message"), str), obj


def ws_url(base: str, path: str) -> str:
    return "ws" + base[len("http") :] + path


def uamp_open(ws: ClientConnection) -> None:
    ws.send(
        orjson.dumps(
            {"type": "session.create", "uamp_version": "1.0", "session": {"modalities": ["text"]}}
        ).decode()
    )


def uamp_sync(mark: str) -> tuple[bytes, Callable[[Any], bool]]:
    return b'{"type":"ping"}', lambda obj: obj.get("type") == "pong"


def realtime_sync(mark: str) -> tuple[bytes, Callable[[Any], bool]]:
    def done(obj: Any) -> bool:
        return obj.get("type") == "error" and obj["error"].get("event_id") == mark

    return orjson.dumps({"type": "fuzz.sync", "event_id": mark}), done


def jsonrpc_sync(mark: str) -> tuple[bytes, Callable[[Any], bool]]:
    def done(obj: Any) -> bool:
        return isinstance(obj, dict) and obj.get("id") == mark

    return orjson.dumps({"jsonrpc": "2.0", "id": mark, "method": "fuzz/sync"}), done


@pytest.mark.parametrize(
    ("path", "opening", "shape", "sync", "check", "count"),
    [
        ("/agents/fz/uamp", uamp_open, fuzz.uamp_event, uamp_sync, check_event, 250),
        ("/agents/fz/realtime", None, fuzz.realtime_event, realtime_sync, check_event, 250),
        ("/agents/fz/acp/stream", None, fuzz.acp_rpc, jsonrpc_sync, check_jsonrpc, 200),
    ],
    ids=["uamp-ws", "realtime-ws", "acp-ws"],
)
def test_websocket_messages(
    served: str,
    path: str,
    opening: Callable[[ClientConnection], None] | None,
    shape: Any,
    sync: Callable[[str], tuple[bytes, Callable[[Any], bool]]],
    check: Callable[[Any], None],
    count: int,
) -> None:
    """Each message, then a sync message the socket must answer: it keeps working."""
    sock = Socket(ws_url(served, path), opening or (lambda ws: None))
    marks = (f"sync-{n}" for n in itertools.count())
    try:

        @fuzzing(count)
        @given(bodies(shape))
        def run(data: bytes) -> None:
            message, done = sync(next(marks))
            for obj in sock.exchange(data, message, done):
                check(obj)

        run()
    finally:
        sock.close()
    assert None not in sock.closes  # every close carried a code
