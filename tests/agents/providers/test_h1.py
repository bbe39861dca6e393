"""The lean HTTP/1.1 client (``uamp_agents.http1_client``): its head parser against h11,
its framing on the wire.

The parser must read what h11 reads whenever it accepts a head, and leave to
h11 (return ``None``) every shape outside its subset. On the wire, raw
trio servers send byte-exact responses -- split anywhere, interim, HTTP/1.0,
compressed, malformed -- and each test checks what the provider got and
whether the connection was reused.
"""

from __future__ import annotations

import functools
import gzip
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import h11
import httpx
import orjson
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from tests._support.h1 import first_event, mutate, replaced
from tests._support.tls import make_ca
from uamp_agents.http1_client import Head, Target, parse_head
from uamp_agents.providers import ModelRequest, ProviderError, _http, openai
from uamp_agents.providers._openai import OpenAIProvider
from uamp_proto.types import Message

from .fakeserver import collect, texts

HI = ModelRequest(messages=[Message(role="user", content="hi")])
BASE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 3"


def h11_head(head: bytes) -> Head | Exception | None:
    """What h11 reads from a response head (without its blank line), as a :class:`Head`."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="POST", target="/", headers=[("host", "a")]))
    conn.send(h11.EndOfMessage())
    event = first_event(conn, head + b"\r\n\r\n")
    if isinstance(event, Exception):
        return event
    if not isinstance(event, h11.Response):
        return None
    headers = [(k.decode("ascii"), v.decode("latin-1")) for k, v in event.headers]
    fields = dict(event.headers)
    length: int | None = 0
    if event.status_code not in (204, 304):
        chunked = fields.get(b"transfer-encoding") == b"chunked"
        length = None if chunked else int(fields[b"content-length"])
    connection = {
        t.strip() for k, v in event.headers if k == b"connection" for t in v.lower().split(b",")
    }
    return Head(event.status_code, headers, length, b"close" in connection)


def test_base_head_is_read_as_h11_reads_it() -> None:
    head = parse_head(BASE)
    assert head == Head(
        200, [("content-type", "application/json"), ("content-length", "3")], 3, False
    )
    assert head == h11_head(BASE)


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\nX-A:  \t v  w \t ",
        b"HTTP/1.1 429\r\ncontent-length: 0\r\nConnection: Keep-Alive, Close\r\nRetry-After: 1",
        b"HTTP/1.1 204 No Content\r\nX-E:\r\nX-L: caf\xe9",
        b"HTTP/1.1 503 Slow Down\r\nContent-Length: 007\r\nx-two: 1\r\nX-Two: 2",
    ],
)
def test_accepted_heads(data: bytes) -> None:
    head = parse_head(data)
    assert head is not None
    assert head == h11_head(data)


#: What to replace in BASE, by what: every one is left to h11.
LEFT_TO_H11 = {
    "version 1.0": (b"HTTP/1.1 ", b"HTTP/1.0 "),
    "version 2": (b"HTTP/1.1 ", b"HTTP/2 "),
    "lowercase version": (b"HTTP/1.1 ", b"http/1.1 "),
    "interim 100": (b" 200 OK", b" 100 Continue"),
    "switching 101": (b" 200 OK", b" 101 Switching Protocols"),
    "two-digit status": (b" 200 OK", b" 20 OK"),
    "reason with control": (b"200 OK", b"200 O\x01K"),
    "no space before reason": (b"200 OK", b"200OK"),
    "no length": (b"\r\nContent-Length: 3", b""),
    "chunked and length": (
        b"Content-Length: 3",
        b"Content-Length: 3\r\nTransfer-Encoding: chunked",
    ),
    "gzip transfer coding": (b"Content-Length: 3", b"Transfer-Encoding: gzip, chunked"),
    "identity transfer coding": (b"Content-Length: 3", b"Transfer-Encoding: identity"),
    "two lengths": (b"Content-Length: 3", b"Content-Length: 3\r\nContent-Length: 3"),
    "length list": (b"Length: 3", b"Length: 3, 3"),
    "signed length": (b"Length: 3", b"Length: +3"),
    "hex length": (b"Length: 3", b"Length: 0x3"),
    "empty length": (b"Length: 3", b"Length: "),
    "overlong length": (b"Length: 3", b"Length: 0000000000000000003"),
    "obs-fold": (b"Content-Type: application/json", b"Content-Type: application/\r\n json"),
    "name with space": (b"Content-Type", b"Content Type"),
    "name then space": (b"Content-Type:", b"Content-Type :"),
    "empty name": (b"Content-Type", b""),
    "no colon": (b"Content-Type: application/json", b"Content-Type application/json"),
    "value NUL": (b"application/json", b"application\x00json"),
    "value DEL": (b"application/json", b"application\x7fjson"),
    "value CR": (b"application/json", b"application\rjson"),
    "value LF": (b"application/json", b"application\njson"),
    "bare LF line end": (b"OK\r\n", b"OK\n"),
    "204 with a body": (b" 200 OK", b" 204 No Content"),
}


@pytest.mark.parametrize(("old", "new"), LEFT_TO_H11.values(), ids=LEFT_TO_H11.keys())
def test_left_to_h11(old: bytes, new: bytes) -> None:
    assert parse_head(replaced(BASE, old, new)) is None


TCHAR = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
visible = "".join(chr(c) for c in range(0x21, 0x7F)) + "".join(chr(c) for c in range(0x80, 0x100))
values = st.builds(
    lambda words, seps: "".join(w + s for w, s in zip(words, seps, strict=False)) + words[-1],
    st.lists(st.text(visible, min_size=1, max_size=8), min_size=1, max_size=3),
    st.lists(st.sampled_from([" ", "\t", "  "]), min_size=2, max_size=2),
) | st.just("")
names = st.text(TCHAR, min_size=1, max_size=12).filter(
    lambda n: n.lower() not in {"content-length", "transfer-encoding", "connection"}
)


@st.composite
def valid_heads(draw: st.DrawFn) -> bytes:
    """Response heads inside the parser's subset (each must be accepted)."""
    status = draw(st.integers(200, 599))
    reason = draw(st.none() | st.text(visible + " \t", max_size=12))
    lines = [(draw(names), draw(values)) for _ in range(draw(st.integers(0, 6)))]
    if status not in (204, 304):
        framing = ("content-length", draw(st.text("0123456789", min_size=1, max_size=18)))
        if draw(st.booleans()):
            framing = ("Transfer-Encoding", draw(st.sampled_from(["chunked", "CHUNKED"])))
        lines.insert(draw(st.integers(0, len(lines))), framing)
    if draw(st.booleans()):
        token = draw(st.sampled_from(["close", "keep-alive", "Keep-Alive, close"]))
        lines.insert(draw(st.integers(0, len(lines))), ("Connection", token))
    ows = st.text(" \t", max_size=2)
    head = f"HTTP/1.1 {status}" + ("" if reason is None else f" {reason}")
    head += "".join(f"\r\n{name}:{draw(ows)}{value}{draw(ows)}" for name, value in lines)
    return head.encode("latin-1")


@settings(max_examples=300, deadline=None)
@given(valid_heads())
def test_generated_heads_are_read_as_h11_reads_them(data: bytes) -> None:
    head = parse_head(data)
    assert head is not None
    assert head == h11_head(data)


SPLICES = [
    b"\x00", b"\r", b"\n", b"\r\n", b"\r\n ", b"\t", b" ", b"\x7f", b":", b",", b"HTTP/1.0",
    b"\r\nTransfer-Encoding: chunked", b"\r\nContent-Length: 1", b"\r\nConnection: close",
    b"\r\nContent-Length: 1, 1", b"\r\nX", b" 100",
]  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_mutated_heads_are_left_to_h11_or_read_as_h11_reads_them(data: st.DataObject) -> None:
    mutated = mutate(data.draw, data.draw(valid_heads()), SPLICES)
    if b"\r\n\r\n" not in mutated:  # else the head would end earlier: not one head
        head = parse_head(mutated)
        assert head is None or head == h11_head(mutated)


@pytest.mark.parametrize(
    ("name", "value"), [("x-a", "b\r\nx-injected: 1"), ("x a", "b"), ("x-a", "b\x00")]
)
def test_a_header_that_cannot_be_sent_is_refused(name: str, value: str) -> None:
    with pytest.raises(httpx.LocalProtocolError):
        Target(httpx.URL("http://a/v1"), {name: value})


# --- on the wire -----------------------------------------------------------------------

COMPLETION = orjson.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
    }
)


def chunked(*parts: bytes, extension: bytes = b"") -> bytes:
    body = b"".join(b"%x%s\r\n%s\r\n" % (len(p), extension, p) for p in parts)
    return body + b"0\r\nx-trailer: 1\r\n\r\n"


def sse(text: str) -> list[bytes]:
    """A streamed completion of ``text``, one server-sent event per word."""
    events = []
    for word in text.split(" "):
        choice = {"index": 0, "delta": {"content": word + " "}, "finish_reason": None}
        events.append({"id": "c", "object": "chat.completion.chunk", "choices": [choice]})
    done = {"index": 0, "delta": {}, "finish_reason": "stop"}
    events.append({"id": "c", "object": "chat.completion.chunk", "choices": [done]})
    return [b"data: " + orjson.dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


Reply = Callable[[trio.abc.Stream], Awaitable[None]]


class RawServer:
    """Answers each request with the next scripted reply, byte for byte; counts connections."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = replies
        self.connections = 0
        self.port = 0

    async def _handle(self, stream: trio.abc.Stream) -> None:
        self.connections += 1
        buffer = b""
        try:
            while self.replies:
                while b"\r\n\r\n" not in buffer:
                    data = await stream.receive_some()
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                while len(buffer) < length:
                    buffer += await stream.receive_some()
                buffer = buffer[length:]
                await self.replies.pop(0)(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the reply closed it, or the client did

    async def start(self, nursery: trio.Nursery, tls: ssl.SSLContext | None = None) -> str:
        if tls is None:
            serve = functools.partial(trio.serve_tcp, self._handle, 0, host="127.0.0.1")
        else:
            serve = functools.partial(
                trio.serve_ssl_over_tcp, self._handle, 0, tls, host="127.0.0.1"
            )
        listeners = await nursery.start(serve)
        sockets = listeners[0].transport_listener.socket if tls else listeners[0].socket
        self.port = sockets.getsockname()[1]
        return f"{'https' if tls else 'http'}://127.0.0.1:{self.port}/v1"


def send(*pieces: bytes, close: bool = False) -> Reply:
    async def reply(stream: trio.abc.Stream) -> None:
        for piece in pieces:
            await stream.send_all(piece)
            await trio.sleep(0.001)  # separate reads on the other side
        if close:
            await stream.aclose()

    return reply


def json_head(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n%scontent-length: %d\r\n\r\n" % (
        extra,
        len(body),
    )


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


async def provider_for(
    replies: list[Reply], nursery: trio.Nursery
) -> tuple[RawServer, OpenAIProvider]:
    server = RawServer(replies)
    url = await server.start(nursery)
    return server, openai("m", api_key="k", base_url=url, max_retries=0, timeout=5)


async def test_a_reply_split_at_every_byte_is_read_whole_and_the_connection_kept() -> None:
    whole = json_head(COMPLETION) + COMPLETION
    events = sse("one two three")
    stream = SSE_HEAD + chunked(*events, extension=b";x=1")
    async with trio.open_nursery() as nursery:
        server, p = await provider_for(
            [
                send(*(whole[i : i + 1] for i in range(len(whole)))),
                send(*(bytes([b]) for b in stream)),
            ],
            nursery,
        )
        assert (await p.generate(HI)).message.content == "hi"
        events, final = await collect(p.stream(HI))
        assert texts(events) == ["one ", "two ", "three "]
        assert final.message.content == "one two three "
        assert server.connections == 1
        assert _http._run_pool().pool.idle_count() == 1
        nursery.cancel_scope.cancel()


async def test_several_events_in_one_read_arrive_together() -> None:
    events = sse("a b c d")
    async with trio.open_nursery() as nursery:
        _, p = await provider_for([send(SSE_HEAD + chunked(*events))], nursery)
        events, final = await collect(p.stream(HI))
        assert texts(events) == ["a ", "b ", "c ", "d "]
        assert final.message.content == "a b c d "
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("reply", "content"),
    [
        # HTTP/1.0, the body ends with the connection: h11 reads it.
        (
            send(
                b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n" + COMPLETION,
                close=True,
            ),
            "hi",
        ),
        # An interim response first.
        (send(b"HTTP/1.1 100 Continue\r\n\r\n", json_head(COMPLETION) + COMPLETION), "hi"),
        # obs-fold in a field.
        (send(json_head(COMPLETION, b"x-a: b\r\n c\r\n") + COMPLETION), "hi"),
        # Line ends without CR.
        (send(json_head(COMPLETION).replace(b"\r\n", b"\n") + COMPLETION), "hi"),
    ],
    ids=["http/1.0", "interim", "obs-fold", "bare LF"],
)
async def test_uncommon_responses_are_read_by_h11_and_their_connection_closed(
    reply: Reply, content: str
) -> None:
    async with trio.open_nursery() as nursery:
        server, p = await provider_for([reply, send(json_head(COMPLETION) + COMPLETION)], nursery)
        assert (await p.generate(HI)).message.content == content
        assert _http._run_pool().pool.idle_count() == 0
        assert (await p.generate(HI)).message.content == "hi"
        assert server.connections == 2
        nursery.cancel_scope.cancel()


async def test_a_compressed_body_is_decoded() -> None:
    body = gzip.compress(COMPLETION)
    async with trio.open_nursery() as nursery:
        server, p = await provider_for(
            [send(json_head(body, b"content-encoding: gzip\r\n") + body)] * 2, nursery
        )
        for _ in range(2):
            assert (await p.generate(HI)).message.content == "hi"
        assert server.connections == 1
        nursery.cancel_scope.cancel()


async def test_bytes_after_the_body_close_the_connection() -> None:
    async with trio.open_nursery() as nursery:
        server, p = await provider_for(
            [
                send(json_head(COMPLETION) + COMPLETION + b"junk"),
                send(json_head(COMPLETION) + COMPLETION),
            ],
            nursery,
        )
        assert (await p.generate(HI)).message.content == "hi"
        assert _http._run_pool().pool.idle_count() == 0
        assert (await p.generate(HI)).message.content == "hi"
        assert server.connections == 2
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        (send(SSE_HEAD + b"zz-not-hex\r\n"), "connection closed before the response was complete"),
        (send(SSE_HEAD + b"5\r\nabcdeXX"), "connection closed before the response was complete"),
        (
            send(SSE_HEAD + b"5\r\nab", close=True),
            "connection closed before the response was complete",
        ),
        (send(b"HTTP/1.1 200 OK\r\n" + b"x-a: b\r\n" * 20_000), "connection closed before"),
        (send(SSE_HEAD + b"0\r\n" + b"x-a: b\r\n" * 20_000), "connection closed before"),
        (send(b"HTTP/1.1 200 OK\r\n", close=True), "connection closed before"),
        (send(b"", close=True), "connection closed before"),
        (send(b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n"), "connection closed before"),
    ],
    ids=[
        "chunk size",
        "chunk end",
        "cut chunk",
        "head too long",
        "trailers too long",
        "cut head",
        "no reply",
        "lengths",
    ],
)
async def test_malformed_responses_fail_the_call(reply: Reply, words: str) -> None:
    async with trio.open_nursery() as nursery:
        _, p = await provider_for([reply], nursery)
        with pytest.raises(ProviderError) as caught:
            async for _ in p.stream(HI):
                pass
        assert words in caught.value.message
        assert caught.value.retryable
        assert _http._run_pool().pool.idle_count() == 0
        nursery.cancel_scope.cancel()


async def test_https_calls_share_one_connection_and_check_the_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = make_ca(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(ca.server.certfile, ca.server.keyfile)
    reply = send(json_head(COMPLETION) + COMPLETION)
    async with trio.open_nursery() as nursery:
        server = RawServer([reply, reply, reply])
        url = await server.start(nursery, server_tls)
        p = openai("m", api_key="k", base_url=url, max_retries=0, timeout=5)
        # The system's CAs do not know this server's: the call fails.
        with pytest.raises(ProviderError) as caught:
            await p.generate(HI)
        assert "CERTIFICATE_VERIFY_FAILED" in caught.value.message
        monkeypatch.setattr(_http, "_SSL_CONTEXT", ssl.create_default_context(cafile=ca.cafile))
        monkeypatch.setattr(_http, "_RUN_POOL", trio.lowlevel.RunVar("uamp_http_pool"))
        for _ in range(2):
            assert (await p.generate(HI)).message.content == "hi"
        assert server.connections == 2  # the refused handshake, then one for both calls
        nursery.cancel_scope.cancel()
