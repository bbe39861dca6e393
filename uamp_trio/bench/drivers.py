"""One request per transport, timed into a :class:`~.stats.Sample`.

A driver is opened once per run (:func:`.driving.open_driver`; for the HTTP
transports :func:`http_driver` opens the shared client) and gives each
worker a :meth:`Driver.worker` context (for ``uamp-ws`` the worker's own
WebSocket connection, for ``uamp-sse`` its own HTTP client, and for
``realtime`` its own OpenAI Realtime session) whose ``send`` runs one
request; each worker plays its own :class:`~.workload.Script` of turns. The
HTTP transports (``openai``, ``agui``, ``a2a`` ...) share one driver, reading the
answer's server-sent events with :class:`uamp_proto.sse.SSEParser` and their
meaning with the transport's :class:`~.dialects.Dialect`. ``send`` never
raises for what the endpoint did: a failure is recorded as the sample's
``error`` kind -- ``http_STATUS``, ``connect``, ``timeout``, ``network``,
``protocol``, ``bad_response``, ``incomplete``, ``stream_error``, the
dialect's own kinds or a UAMP error code.
"""

from __future__ import annotations

import contextlib
import ssl
import urllib.request
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any, Protocol

import attrs
import httpx
import orjson
import trio

from uamp_agents.http1_client import Target
from uamp_agents.http1_pool import LeanPool, PooledResponse
from uamp_proto import __version__
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.sse import SSEParser

from ..client.uamp import ClientError, SSEClient, UampClient, connect, connect_sse, open_websocket
from ..engines.streams import receive_or_eof
from ..engines.ws_frames import FrameEngine, WebSocketClosed, make_engine
from .config import BenchConfig, realtime_url, uamp_sse_url, uamp_ws_url
from .dialects import DIALECTS, Dialect, Reader, Step
from .stats import Sample
from .workload import Script

__all__ = [
    "Driver",
    "JsonWebSocket",
    "RealtimeDriver",
    "Send",
    "UampSSEDriver",
    "UampWebSocketDriver",
    "dial_json",
    "http_driver",
    "http_error_kind",
    "record_step",
    "refused_send",
    "ssl_context_of",
]

#: Seconds between the tries of a worker that could not connect.
_RETRY_PAUSE = 0.5

#: Runs one request, filling in the sample.
Send = Callable[[Sample], Awaitable[None]]


class Driver(Protocol):
    """Gives each worker what it needs to send requests."""

    #: Where the requests go (for the report).
    endpoint: str
    #: The wire protocols the responses came over (``HTTP/1.1``, ``HTTP/2``, ``websocket``).
    protocols: set[str]

    def worker(self) -> contextlib.AbstractAsyncContextManager[Send]:
        """A worker's ``send``, open for the worker's lifetime."""
        ...


def http_error_kind(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.ConnectError):
        return "connect"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.LocalProtocolError):
        return "protocol"
    return "network"


class _HTTP:
    """One request per :class:`~.dialects.Dialect`: on the run's lean pool, or on httpx.

    HTTP/1.1 requests go over a :class:`~uamp_agents.http1_pool.LeanPool`:
    each request's head and body leave in one write, and a response costs the
    generator a fraction of what httpx's stack does, so one process keeps a
    fast server busy (``docs/bench.md``). ``--http2`` and a proxy set in the
    environment go through ``client`` (httpx) instead.
    """

    def __init__(
        self,
        config: BenchConfig,
        dialect: Dialect,
        *,
        lean: tuple[LeanPool, Target] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.endpoint = dialect.endpoint(config)
        self.protocols: set[str] = set()
        self._config = config
        self._lean = lean
        self._client = client
        self._dialect = dialect
        self._workload = config.workload()
        self._headers = request_headers(config, dialect)

    @contextlib.asynccontextmanager
    async def worker(self) -> AsyncIterator[Send]:
        yield partial(self._send, self._workload.script())

    async def _send(self, script: Script, sample: Sample) -> None:
        turn = script.next(sample)
        body = self._dialect.body(self._config, turn)
        reply: list[str] = []
        said: list[Any] = []  # the client tool calls answered so far
        for _ in range(MAX_TOOL_ROUNDS + 1):
            reader = self._dialect.reader()
            await self._request(body, sample, reply, reader)
            if sample.error is not None or not turn.tools:
                break
            follow = self._dialect.answer(self._config, turn, reader, said)
            if follow is None:
                break
            body, sample.end = follow, 0.0  # the turn goes on: its end is the last answer's
        else:
            sample.error = "tool_rounds"
        if not sample.end:
            sample.end = trio.current_time()
        if sample.error is None:
            script.answered(turn, "".join(reply))

    async def _open(self, body: bytes) -> PooledResponse | httpx.Response:
        """POST ``body``; the response with its body still to read (the caller closes it)."""
        if self._lean is not None:
            pool, target = self._lean
            response = await pool.send(target, body, self._config.timeout)
            self.protocols.add("HTTP/1.1")
            return response
        assert self._client is not None
        request = self._client.build_request(
            "POST", self.endpoint, content=body, headers=self._headers
        )
        sent = await self._client.send(request, stream=True)
        self.protocols.add(sent.http_version)
        return sent

    async def _request(self, body: bytes, sample: Sample, reply: list[str], reader: Reader) -> None:
        try:
            response = await self._open(body)
            try:
                if response.status_code >= 400:
                    sample.bytes += len(await response.aread())
                    sample.error = f"http_{response.status_code}"
                elif self._config.stream:
                    await self._read_stream(response, sample, reply, reader)
                else:
                    whole = await response.aread()
                    sample.bytes += len(whole)
                    record_step(sample, self._dialect.whole(whole), reply)
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            if not sample.end:  # a failure after the stream's end marker does not count
                sample.error = http_error_kind(exc)

    async def _read_stream(
        self,
        response: PooledResponse | httpx.Response,
        sample: Sample,
        reply: list[str],
        reader: Reader,
    ) -> None:
        parser = SSEParser()
        chunks = response.aiter_bytes()
        async for chunk in chunks:
            sample.bytes += len(chunk)
            for event in parser.feed(chunk):
                step = reader.step(event.data)
                record_step(sample, step, reply)
                if step.done or step.error:
                    sample.end = trio.current_time()
                    sample.bytes += await _drain(chunks)
                    return
        sample.error = "incomplete"


def request_headers(config: BenchConfig, dialect: Dialect) -> dict[str, str]:
    """The fields every request of ``dialect`` carries: its own, then the user's (``--header``)."""
    return {"content-type": "application/json", **dict(dialect.headers), **dict(config.headers)}


#: The most client tool rounds one turn may take before it fails as ``tool_rounds``.
MAX_TOOL_ROUNDS = 4


async def _drain(chunks: AsyncIterator[bytes]) -> int:
    """Read what is left of a body whose stream has ended (at most :data:`DRAIN_LIMIT` bytes).

    The body's own end (a chunked body's last chunk) follows the stream's
    end marker; reading it keeps the connection for the next request, as the
    OpenAI SDK does. Without it the connection is closed, and every
    streamed request would open a new one. Returns the bytes read.
    """
    left = DRAIN_LIMIT
    async for chunk in chunks:
        left -= len(chunk)
        if left < 0:
            break
    return DRAIN_LIMIT - left


#: What is read of a body after its stream's end marker before giving up on it.
DRAIN_LIMIT = 64 * 1024


def record_step(sample: Sample, step: Step, reply: list[str] | None = None) -> None:
    """Note a step's delta (now) or error in ``sample`` (its text in ``reply``)."""
    if step.text:
        sample.deltas.append(trio.current_time())
        sample.text += len(step.text)
        if reply is not None:
            reply.append(step.text)
    if step.tool is not None:
        sample.tool_calls.append(step.tool)
    if step.error is not None:
        sample.error = step.error


class UampWebSocketDriver:
    """Native UAMP over WebSocket: a connection per worker, a session per conversation.

    A conversation's turns are ``response.create`` calls on its one session
    (the server keeps the history); the session ends when the worker starts
    its next conversation. Timing starts when the turn is sent
    (``respond``), after the session was created, so the figures are the
    turn's alone.
    """

    def __init__(self, config: BenchConfig) -> None:
        self.endpoint, agent = uamp_ws_url(config.url, config.agent)
        self._agent = agent
        self._workload = config.workload()
        self.protocols = {"websocket"}
        self._headers = config.headers
        self._ssl = ssl_context_of(config)

    @contextlib.asynccontextmanager
    async def worker(self) -> AsyncIterator[Send]:
        connected = False
        try:
            async with connect(
                self.endpoint, headers=self._headers, ssl_context=self._ssl
            ) as client:
                connected = True
                yield partial(self._send, _UampWorker(client, self._workload.script()))
                return
        except (ClientError, OSError, trio.TooSlowError) as exc:
            if connected:
                raise
            kind = exc.code if isinstance(exc, ClientError) else "connect"
        yield refused_send(kind)

    async def _send(self, worker: _UampWorker, sample: Sample) -> None:
        try:
            await self._turn(worker, sample)
        except ClientError as exc:
            sample.error = exc.code
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            sample.error = "network"
        if not sample.end:
            sample.end = trio.current_time()

    async def _turn(self, worker: _UampWorker, sample: Sample) -> None:
        # The request's bytes: the session's creation (on a first turn) and the
        # turn, as the HTTP drivers count a whole response body (framing included here).
        client = worker.client
        before = client.bytes_received
        turn = worker.script.next(sample)
        if turn.index == 0 or worker.session is None:
            if worker.session is not None:
                session, worker.session = worker.session, None
                await session.end()
            worker.session = await client.create_session(self._agent)
        sample.start = trio.current_time()
        stream = worker.session.respond(turn.prompt)
        async for event in stream:
            delta = event.delta if isinstance(event, ev.ResponseDelta) else None
            if isinstance(delta, ty.DeltaText) and delta.text:
                sample.deltas.append(trio.current_time())
                sample.text += len(delta.text)
            elif isinstance(delta, ty.DeltaToolCall) and delta.tool_call.name:
                sample.tool_calls.append(delta.tool_call.name)  # the agent's own tool
            elif isinstance(event, ev.ToolCall):
                sample.tool_calls.append(event.name)
        sample.end = trio.current_time()
        sample.bytes = client.bytes_received - before
        result = stream.result
        if result is None:
            sample.error = "incomplete"
        elif result.status != "completed":
            sample.error = result.error.code if result.error else result.status
        if sample.error is not None:  # a failed turn ends its conversation
            session, worker.session = worker.session, None
            await session.end()


@attrs.define
class _UampWorker:
    """One UAMP worker: its client, its script and its conversation's session."""

    client: UampClient | SSEClient
    script: Script
    session: Any = None


class UampSSEDriver(UampWebSocketDriver):
    """Native UAMP over HTTP+SSE (UAMP 13.2): the same turns as :class:`UampWebSocketDriver`.

    Each worker has its own HTTP client (its connections: each session's
    ``GET .../events/stream`` and the POSTs); a conversation is one HTTP
    session (``session.create`` POSTed, its stream opened), each turn a POST
    of ``response.create`` whose events come back on the stream. The bytes
    are those of the event stream.
    """

    def __init__(self, config: BenchConfig) -> None:
        self._base, self._agent = uamp_sse_url(config.url, config.agent)
        self.endpoint = f"{self._base}/agents/{self._agent}/events"
        self._workload = config.workload()
        self.protocols = {"HTTP/1.1"}
        self._headers = config.headers
        self._verify = not config.insecure
        self._timeout = config.timeout

    @contextlib.asynccontextmanager
    async def worker(self) -> AsyncIterator[Send]:
        async with (
            httpx.AsyncClient(
                headers=dict(self._headers), verify=self._verify, timeout=self._timeout
            ) as http,
            connect_sse(self._base, http=http) as client,
        ):
            yield partial(self._send, _UampWorker(client, self._workload.script()))

    async def _send(self, worker: _UampWorker, sample: Sample) -> None:
        try:
            await super()._send(worker, sample)
        except httpx.HTTPError as exc:
            sample.error = http_error_kind(exc)
            if not sample.end:
                sample.end = trio.current_time()


def refused_send(kind: str) -> Send:
    """The ``send`` of a worker that could not connect: one failure of ``kind`` per try.

    Paced, so that a ``--duration`` run does not spin.
    """

    async def refused(sample: Sample) -> None:
        await trio.sleep(_RETRY_PAUSE)
        sample.error = kind
        sample.end = trio.current_time()

    return refused


#: The Realtime events that carry response text (GA name, beta name).
_REALTIME_TEXT = frozenset({"response.output_text.delta", "response.text.delta"})


class JsonWebSocket:
    """A client WebSocket of JSON text messages: its socket, framing and unread messages."""

    def __init__(self, stream: trio.abc.Stream, engine: FrameEngine, initial: bytes) -> None:
        self.stream = stream
        self.engine = engine
        self.pending: deque[bytes | str] = deque(engine.feed(initial) if initial else ())
        self.received = len(initial)

    async def next_event(self) -> dict[str, Any]:
        """The next server event (answering pings meanwhile).

        Raises:
            WebSocketClosed: The connection closed.
        """
        while not self.pending:
            data = await receive_or_eof(self.stream, 65536)
            self.received += len(data)
            self.pending.extend(self.engine.feed(data))  # b"" raises WebSocketClosed
            owed = self.engine.take()  # pongs
            if owed:
                await self.stream.send_all(owed)
        event = orjson.loads(self.pending.popleft())
        return event if isinstance(event, dict) else {}

    async def send(self, *messages: Any) -> None:
        """Send each of ``messages`` as one JSON text message."""
        for message in messages:
            self.engine.text(orjson.dumps(message))
        await self.stream.send_all(self.engine.take())


async def dial_json(
    url: str, headers: tuple[tuple[str, str], ...], ssl_context: ssl.SSLContext | None
) -> JsonWebSocket | str:
    """A :class:`JsonWebSocket` to ``url``, or the kind of failure (``connect``, a UAMP code)."""
    try:
        stream, initial = await open_websocket(
            url, headers=headers, ssl_context=ssl_context, subprotocols=()
        )
    except (ClientError, OSError, trio.TooSlowError) as exc:
        return str(exc.code) if isinstance(exc, ClientError) else "connect"
    return JsonWebSocket(stream, make_engine(client=True, max_message_size=None), initial)


class RealtimeDriver:
    """OpenAI Realtime over WebSocket: a session per worker, a response per request.

    Each request adds the prompt as a user message (``conversation.item.create``)
    and asks for a response (``response.create``); ``response.output_text.delta``
    (or the beta ``response.text.delta``) events are the deltas,
    ``response.done`` ends (a status other than ``completed`` fails with that
    status), an ``error`` event fails with its code. The worker's turns
    accumulate in its session's conversation, as in a chat: with ``--turns``
    or a dataset its prompts follow its script, but the session is not reset
    between conversations (every conversation a worker plays is one
    Realtime conversation).
    """

    def __init__(self, config: BenchConfig) -> None:
        self.endpoint = realtime_url(config.url, config.agent)
        self.protocols = {"websocket"}
        self._headers = config.headers
        self._ssl = ssl_context_of(config)
        self._workload = config.workload()

    @staticmethod
    def _ask(prompt: str) -> tuple[bytes, bytes]:
        item = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": prompt}],
        }
        return (
            orjson.dumps({"type": "conversation.item.create", "item": item}),
            orjson.dumps({"type": "response.create"}),
        )

    @contextlib.asynccontextmanager
    async def worker(self) -> AsyncIterator[Send]:
        session = await dial_json(self.endpoint, self._headers, self._ssl)
        if isinstance(session, str):
            yield refused_send(session)
            return
        try:
            yield partial(self._send, session, self._workload.script())
        finally:
            await trio.aclose_forcefully(session.stream)

    async def _send(self, session: JsonWebSocket, script: Script, sample: Sample) -> None:
        before = session.received
        try:
            for message in self._ask(script.next(sample).prompt):
                session.engine.text(message)
            await session.stream.send_all(session.engine.take())
            await self._read(session, sample)
        except WebSocketClosed:
            sample.error = "closed"
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            sample.error = "network"
        except orjson.JSONDecodeError:
            sample.error = "bad_response"
        sample.bytes = session.received - before
        if not sample.end:
            sample.end = trio.current_time()

    async def _read(self, session: JsonWebSocket, sample: Sample) -> None:
        while True:
            event = await session.next_event()
            kind = event.get("type")
            if kind in _REALTIME_TEXT:
                delta = event.get("delta")
                record_step(sample, Step(text=delta if isinstance(delta, str) else ""))
            elif kind == "error":
                error = event.get("error")
                code = error.get("code") if isinstance(error, dict) else None
                sample.error = code if isinstance(code, str) and code else "error"
                return
            elif kind == "response.done":
                response = event.get("response")
                status = response.get("status") if isinstance(response, dict) else None
                if status != "completed":
                    sample.error = status if isinstance(status, str) else "bad_response"
                sample.end = trio.current_time()
                return


def ssl_context_of(config: BenchConfig) -> ssl.SSLContext | None:
    if not config.insecure:
        return None
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


@contextlib.asynccontextmanager
async def http_driver(config: BenchConfig) -> AsyncIterator[Driver]:
    """The driver of an HTTP dialect's ``config.transport``, with its connections' pool open.

    HTTP/1.1 goes over the lean pool; ``--http2``, a proxy set in the
    environment (``HTTP_PROXY`` ..., as httpx reads it) or a URL the lean
    client does not take goes over an ``httpx.AsyncClient``.
    """
    dialect = DIALECTS[config.transport]
    target = None
    if not config.http2 and not urllib.request.getproxies():
        headers = request_headers(config, dialect)
        given = {name.lower() for name in headers}
        headers |= {name: value for name, value in LEAN_HEADERS.items() if name not in given}
        try:
            target = Target(httpx.URL(dialect.endpoint(config)), headers)
        except httpx.HTTPError:
            target = None  # httpx reports it, request by request
    if target is not None:
        context = ssl_context_of(config) or ssl.create_default_context()
        async with LeanPool(context, max_idle=max(1, config.concurrency)) as pool:
            yield _HTTP(config, dialect, lean=(pool, target))
        return
    limits = httpx.Limits(
        max_connections=config.concurrency, max_keepalive_connections=config.concurrency
    )
    async with httpx.AsyncClient(
        http1=not config.http2,
        http2=config.http2,
        limits=limits,
        timeout=httpx.Timeout(config.timeout),
        verify=not config.insecure,
    ) as client:
        yield _HTTP(config, dialect, client=client)


#: What the lean pool's requests add to :func:`request_headers` unless the
#: user set them (``--header``): the generator's name, and the encodings
#: httpx asks for (a server that compresses does so for both; the pool
#: decodes with httpx's decoders).
LEAN_HEADERS = {"user-agent": f"uamp-bench/{__version__}", "accept-encoding": "gzip, deflate"}
