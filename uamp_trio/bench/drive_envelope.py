"""The ``envelope-http`` and ``envelope-ws`` bench drivers: spec 003's signed envelopes.

Both go through the project's spec 003 clients (:mod:`uamp_trio.client.envelope`).
Each worker has its own signer (a fresh Ed25519 key: each worker is its own
caller, as separate clients are) and its own client: for ``envelope-http`` an
:class:`~uamp_trio.client.envelope.EnvelopeHTTPClient` on its own httpx
client (each request ``POST .../v1/messages`` then ``GET`` the stream it
names, acknowledging as it reads), for ``envelope-ws`` one length-prefixed
WebSocket (``.../uamp/1/ws``). A request is one ``ask`` envelope: its
``chunk`` frames with text are the deltas, the ``done`` frame ends, an
``error`` frame fails as ``envelope_CODE`` (its section 9 code), a
``cancel`` frame as ``cancelled``; a refusal (an error envelope, a refused
POST, a broken ``delta_seq``) fails as ``envelope_CODE`` too. A later turn
of a conversation names the previous exchange in its ``context`` (the server
continues that conversation). The bytes are those of the delta frames' JSON.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import partial
from urllib.parse import urlsplit, urlunsplit

import attrs
import httpx
import trio
import trio_websocket

from uamp_proto import envelope as wire
from uamp_proto.envelope import Delta, DeltaType

from ..client.envelope import (
    EnvelopeClientError,
    EnvelopeHTTPClient,
    EnvelopeSigner,
    EnvelopeWSClient,
    Reply,
    envelope_ws,
)
from .config import BenchConfig, endpoint_url
from .dialects import Step
from .drivers import Send, http_error_kind, record_step, refused_send
from .stats import Sample
from .workload import Script

__all__ = ["EnvelopeDriver", "envelope_base"]


def envelope_base(config: BenchConfig) -> tuple[str, str]:
    """The agent's base URL (``http(s)://host/agents/NAME``, or a root) and its name.

    The name is ``--agent``, else the one in ``/agents/NAME``, else ``default``
    (a server's root serves its only or default agent).

    Raises:
        ValueError: Not an http(s) URL.
    """
    base = endpoint_url(config.url, config.agent, "").rstrip("/")
    path = urlsplit(base).path
    name = config.agent or (path.split("/agents/", 1)[1].split("/")[0] if "/agents/" in path
                            else "default")  # fmt: skip
    return base, name


@attrs.define
class _Worker:
    """One worker: its client, its script and its conversation's last exchange."""

    client: EnvelopeHTTPClient | EnvelopeWSClient
    script: Script
    last: Reply | None = None


class EnvelopeDriver:
    """Spec 003 over its HTTP binding (``ws=False``) or its WebSocket binding."""

    def __init__(self, config: BenchConfig, *, ws: bool) -> None:
        base, agent = envelope_base(config)
        self._base = base
        self._to = f"urn:uamp:agent:{agent}"
        self._ws = ws
        self._headers = dict(config.headers)
        self._verify = not config.insecure
        self._timeout = config.timeout
        self._workload = config.workload()
        if ws:
            parts = urlsplit(base)
            scheme = "wss" if parts.scheme == "https" else "ws"
            self.endpoint = urlunsplit((scheme, parts.netloc, parts.path + "/uamp/1/ws", "", ""))
            self.protocols = {"websocket"}
        else:
            self.endpoint = base + "/v1/messages"
            self.protocols = {"HTTP/1.1"}

    @contextlib.asynccontextmanager
    async def worker(self) -> AsyncIterator[Send]:
        signer = EnvelopeSigner.ephemeral()
        if not self._ws:
            async with (
                httpx.AsyncClient(
                    headers=self._headers, verify=self._verify, timeout=self._timeout
                ) as http,
                EnvelopeHTTPClient(self._base, signer, to=self._to, http=http) as client,
            ):
                yield partial(self._send, _Worker(client, self._workload.script()))
            return
        connected = False
        try:
            async with envelope_ws(self.endpoint, signer, to=self._to) as socket:
                connected = True
                yield partial(self._send, _Worker(socket, self._workload.script()))
                return
        except (trio_websocket.HandshakeError, OSError) as exc:
            if connected:
                raise
            kind = "connect" if isinstance(exc, OSError) else "handshake"
        yield refused_send(kind)

    async def _send(self, worker: _Worker, sample: Sample) -> None:
        turn = worker.script.next(sample)
        if turn.index == 0:
            worker.last = None
        context = None if worker.last is None else [worker.last.context()]

        def on_delta(delta: Delta) -> None:
            sample.bytes += len(wire.encode_delta(delta))
            text = delta.payload.get("text") if delta.payload else None
            if delta.type is DeltaType.CHUNK and isinstance(text, str):
                record_step(sample, Step(text=text))

        reply = None
        try:
            reply = await worker.client.ask(turn.prompt, context=context, on_delta=on_delta)
        except EnvelopeClientError as exc:
            sample.error = f"envelope_{exc.code}"
        except httpx.HTTPError as exc:
            sample.error = http_error_kind(exc)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                trio_websocket.ConnectionClosed):  # fmt: skip
            sample.error = "network"
        sample.end = trio.current_time()
        if reply is not None:
            sample.error = _outcome(reply)
        worker.last = reply if sample.error is None else None  # a failed turn ends it


def _outcome(reply: Reply) -> str | None:
    """The error kind of a finished exchange (``None``: it ended ``done``)."""
    final = reply.final
    if final is None:
        return "incomplete"
    if final.type is DeltaType.DONE:
        return None
    if final.type is DeltaType.CANCEL:
        return "cancelled"
    code = final.payload.get("code") if final.payload else None
    return f"envelope_{code}" if isinstance(code, str) else "stream_error"
