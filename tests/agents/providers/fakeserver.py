"""A small scripted HTTP/1.1 server (trio + h11) that plays a model API.

Each test queues :class:`Reply` objects; the server answers requests with
them in order and records every request it received. A reply may carry a
``check`` that runs inside the server against the request: when it fails,
the server answers 400 with the assertion text (so the provider call fails
loudly) and keeps the failure for the fixture to re-raise at teardown.

Streaming replies are sent as chunked transfer encoding, one chunk per
server-sent event, the way the real APIs stream. ``cut_after`` closes the
socket mid-body; ``stall`` accepts the request and never answers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import h11
import orjson
import pytest
import trio

from uamp_agents.providers import (
    ModelRequest,
    ModelResponse,
    Provider,
    ProviderError,
    ProviderEvent,
)
from uamp_proto.events import Event, ResponseDelta, Thinking, UsageDelta
from uamp_proto.types import (
    DeltaText,
    DeltaToolCall,
    FunctionDefinition,
    Message,
    ToolCallFragment,
    ToolDefinition,
    ToolInvocation,
    UsageStats,
)

FIXTURES = Path(__file__).parent / "fixtures"

#: The question every provider test asks (a system prompt and a user turn).
ASK = [
    Message(role="system", content="Answer briefly."),
    Message(role="user", content="What is the capital of France?"),
]


#: The answer every vendor's recorded text reply gives to :data:`ASK`.
PARIS = "Paris is the capital of France."


def check_answer(result: ModelResponse, *, model: str, usage: UsageStats) -> None:
    """``result`` is the recorded :data:`PARIS` answer, ended normally, of ``model``."""
    assert result.message.content == PARIS
    assert result.finish_reason == "stop"
    assert result.model == model
    assert result.usage == usage


def check_streamed(events: list[Event], final: ModelResponse, deltas: list[str]) -> UsageStats:
    """A text answer streamed as ``deltas``, ended normally, its usage once and last.

    Returns:
        That usage (the final response's too).
    """
    assert texts(events) == deltas
    assert final.message.content == "".join(deltas)
    assert final.finish_reason == "stop"
    usage = [e for e in events if isinstance(e, UsageDelta)]
    assert usage == [events[-1]]
    assert final.usage == usage[0].delta
    return usage[0].delta


def question(text: str, tool: ToolDefinition, tool_choice: Any = None) -> ModelRequest:
    """A user's ``text`` to a model that may call ``tool``."""
    return ModelRequest(
        messages=[Message(role="user", content=text)], tools=[tool], tool_choice=tool_choice
    )


def weather_call(call_id: str, arguments: str, **unknown: Any) -> ToolInvocation:
    """A call of the :func:`weather_tool` (``unknown``: the vendor's extra members)."""
    return ToolInvocation(id=call_id, name="get_weather", arguments=arguments, unknown=unknown)


def weather_tool(**schema: Any) -> ToolDefinition:
    """The tests' ``get_weather`` tool; ``schema`` adds to its JSON Schema (``required`` ...)."""
    return ToolDefinition(
        function=FunctionDefinition(
            name="get_weather",
            description="Current weather in a city",
            parameters={"type": "object", "properties": {"city": {"type": "string"}}, **schema},
        )
    )


def fixture_bytes(name: str) -> bytes:
    """The bytes of a recorded wire fixture, e.g. ``"openai/text.sse"``."""
    return (FIXTURES / name).read_bytes()


def fixture_json(name: str) -> Any:
    """A JSON wire fixture, parsed."""
    return orjson.loads(fixture_bytes(name))


def sse_events(raw: bytes) -> list[bytes]:
    """Split an SSE fixture into its events (each ends with its blank line)."""
    sep = b"\r\n\r\n" if b"\r\n\r\n" in raw else b"\n\n"
    return [part + sep for part in raw.split(sep) if part.strip()]


@attrs.frozen
class Request:
    """One request as the server received it."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        """The body parsed as JSON."""
        return orjson.loads(self.body)


Check = Callable[[Request], None]


@attrs.frozen(kw_only=True)
class Reply:
    """A scripted answer.

    Attributes:
        status: HTTP status.
        headers: Extra response headers.
        body: A whole body (sent with Content-Length).
        chunks: A streamed body, one chunk per element (chunked encoding).
        cut_after: Close the connection after this many chunks, mid-body.
        stall: Read the request, then never answer.
        hang_up: Close the connection after the answer, without saying so
            (the way a server drops an idle keep-alive connection).
        check: Assertions on the request, run by the server.
    """

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    chunks: tuple[bytes, ...] | None = None
    cut_after: int | None = None
    stall: bool = False
    hang_up: bool = False
    check: Check | None = None


def json_reply(name_or_obj: Any, status: int = 200, **kw: Any) -> Reply:
    """A JSON reply from a fixture name (``"openai/text.json"``) or an object."""
    body = fixture_bytes(name_or_obj) if isinstance(name_or_obj, str) else orjson.dumps(name_or_obj)
    headers = (("content-type", "application/json"), *kw.pop("headers", ()))
    return Reply(status=status, body=body, headers=headers, **kw)


def sse_reply(name: str, **kw: Any) -> Reply:
    """A streamed reply replaying an SSE fixture, one event per chunk."""
    headers = (
        ("content-type", "text/event-stream; charset=utf-8"),
        ("cache-control", "no-cache"),
        *kw.pop("headers", ()),
    )
    return Reply(chunks=tuple(sse_events(fixture_bytes(name))), headers=headers, **kw)


class FakeServer:
    """The server: a reply queue, a request log, an auth rule."""

    def __init__(self, auth: Callable[[Request], bytes | None] | None = None) -> None:
        self.port = 0
        self.requests: list[Request] = []
        self.replies: list[Reply] = []
        self.failures: list[str] = []
        #: Connections accepted, and of those closed (by either side).
        self.connections = 0
        self.closed = 0
        self._auth = auth

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def queue(self, *replies: Reply) -> None:
        """Answer the next requests with ``replies``, in order."""
        self.replies.extend(replies)

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on 127.0.0.1, port 0; report started once listening."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self)
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        self.connections += 1
        try:
            while True:
                request = await self._read_request(conn, stream)
                if request is None:
                    return
                keep = await self._answer(conn, stream, request)
                if not keep or conn.our_state is not h11.DONE:
                    return
                if conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            return
        finally:
            await stream.aclose()
            self.closed += 1

    async def _next(self, conn: h11.Connection, stream: trio.SocketStream) -> Any:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
                continue
            return event

    async def _read_request(
        self, conn: h11.Connection, stream: trio.SocketStream
    ) -> Request | None:
        event = await self._next(conn, stream)
        if not isinstance(event, h11.Request):
            return None
        body = bytearray()
        while True:
            part = await self._next(conn, stream)
            if isinstance(part, h11.Data):
                body += part.data
            elif isinstance(part, h11.EndOfMessage):
                break
            else:
                return None
        headers = {k.decode().lower(): v.decode() for k, v in event.headers}
        request = Request(event.method.decode(), event.target.decode(), headers, bytes(body))
        self.requests.append(request)
        return request

    async def _send_simple(
        self, conn: h11.Connection, stream: trio.SocketStream, status: int, body: bytes
    ) -> None:
        headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
        await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)))
        await stream.send_all(conn.send(h11.Data(data=body)))
        await stream.send_all(conn.send(h11.EndOfMessage()))

    async def _answer(
        self, conn: h11.Connection, stream: trio.SocketStream, request: Request
    ) -> bool:
        if self._auth is not None:
            refusal = self._auth(request)
            if refusal is not None:
                await self._send_simple(conn, stream, 401, refusal)
                return True
        if not self.replies:
            self.failures.append(f"unexpected request {request.method} {request.target}")
            await self._send_simple(conn, stream, 599, b'{"error": "no scripted reply"}')
            return True
        reply = self.replies.pop(0)
        if reply.check is not None:
            try:
                reply.check(request)
            except AssertionError as exc:
                text = f"fake server check failed: {exc}"
                self.failures.append(text)
                body = orjson.dumps({"error": {"message": text, "type": "check_failed"}})
                await self._send_simple(conn, stream, 400, body)
                return True
        if reply.stall:
            # Never answer; return once the client gives up and hangs up.
            while await stream.receive_some(65536):
                pass
            return False
        headers = list(reply.headers)
        if reply.chunks is None:
            headers.append(("content-length", str(len(reply.body))))
        response = h11.Response(status_code=reply.status, headers=headers)
        await stream.send_all(conn.send(response))
        if reply.chunks is None:
            await stream.send_all(conn.send(h11.Data(data=reply.body)))
        else:
            for n, chunk in enumerate(reply.chunks):
                if reply.cut_after is not None and n >= reply.cut_after:
                    return False  # close mid-body: no final zero-length chunk
                await stream.send_all(conn.send(h11.Data(data=chunk)))
                await trio.sleep(0)
        await stream.send_all(conn.send(h11.EndOfMessage()))
        return not reply.hang_up


async def collect(stream: AsyncIterator[ProviderEvent]) -> tuple[list[Event], ModelResponse]:
    """Drain a provider stream: (the events before the end, the final response)."""
    items = [item async for item in stream]
    assert items, "the stream yielded nothing"
    *events, final = items
    assert isinstance(final, ModelResponse), final
    assert all(isinstance(e, Event) for e in events), events
    return [e for e in events if isinstance(e, Event)], final


def texts(events: list[Any]) -> list[str]:
    """The text of every text delta, in order."""
    return [
        e.delta.text
        for e in events
        if isinstance(e, ResponseDelta) and isinstance(e.delta, DeltaText)
    ]


def fragments(events: list[Any]) -> list[ToolCallFragment]:
    """Every tool-call fragment, in order."""
    return [
        e.delta.tool_call
        for e in events
        if isinstance(e, ResponseDelta) and isinstance(e.delta, DeltaToolCall)
    ]


def thoughts(events: list[Any]) -> list[Thinking]:
    """Every thinking event, in order."""
    return [e for e in events if isinstance(e, Thinking)]


async def provider_error(call: Awaitable[object]) -> ProviderError:
    """The :class:`ProviderError` that awaiting ``call`` raises (the test fails if none)."""
    with pytest.raises(ProviderError) as info:
        await call
    return info.value


async def malformed_json_errors(provider: Provider) -> tuple[ProviderError, ProviderError]:
    """The errors of a streamed and of a plain call, each answered with malformed JSON.

    Queue the two bad replies (the stream's first) before calling.
    """
    request = ModelRequest(messages=ASK)
    with pytest.raises(ProviderError) as streamed:
        await collect(provider.stream(request))
    with pytest.raises(ProviderError) as plain:
        await provider.generate(request)
    return streamed.value, plain.value
