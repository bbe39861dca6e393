"""A2A push delivery connects to the address it checked, and redirects are checked too (issue 29).

A real server on 127.0.0.1 (its own thread and ``trio.run``) serves the
conformance kit's scenario agent; a2a-sdk's JSON-RPC client sets push
configs and resumes a paused task, whose updates are POSTed to real
receivers on loopback: the webhook on 127.0.0.1 (allow-listed) and an
"internal" service on 127.0.0.2, which no delivery may reach. The one part
that cannot be real is a name whose answers change: the server's trio
resolver is replaced (``trio.socket.set_custom_hostname_resolver``, from a
service the server starts) by a stub that answers ``hook.test`` with
127.0.0.1 and 127.0.0.2 by turns -- the DNS rebinding an attacker's name
server does. On cb59486 the check got 127.0.0.1 and the HTTP client, which
resolved again, connected to 127.0.0.2.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import trio
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb

from tests._support.agents import run_asyncio
from tests._support.tls import make_ca
from tests._support.webhooks import Receiver, scenario_agent
from uamp_trio.app import create_app, default_transports
from uamp_trio.transports import a2a

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class StubResolver(trio.abc.HostnameResolver):
    """Answers each stubbed name with its addresses in turn; every other name as the system does.

    ``calls`` counts the lookups of each stubbed name.
    """

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.calls: dict[str, int] = dict.fromkeys(answers, 0)

    async def getaddrinfo(
        self,
        host: bytes | None,
        port: bytes | str | int | None,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> list[Any]:
        name = host.decode() if isinstance(host, bytes) else host
        if name in self.answers:
            turn = self.calls[name]
            self.calls[name] += 1
            address = self.answers[name][turn % len(self.answers[name])]
            number = int(port) if port is not None else 0
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, number))]
        return await trio.to_thread.run_sync(
            socket.getaddrinfo, host, port, family, type, proto, flags
        )

    async def getnameinfo(self, sockaddr: tuple[Any, ...], flags: int) -> tuple[str, str]:
        return await trio.to_thread.run_sync(socket.getnameinfo, sockaddr, flags)


def _serve(thread_server: Any, push: a2a.PushSender, resolver: StubResolver) -> Any:
    transports = [a2a.transport(push=push) if t is a2a.mount else t for t in default_transports()]
    app = create_app([scenario_agent()], transports=transports, payment_policy=None)

    async def use_the_stub() -> None:  # in the server's own trio run
        trio.socket.set_custom_hostname_resolver(resolver)

    app.services.append(use_the_stub)
    return thread_server(app)


def _send(message_id: str, **message: Any) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(
        message=pb.Message(
            role=pb.Role.ROLE_USER, parts=[pb.Part(text="hi")], message_id=message_id, **message
        )
    )


async def _push_updates(server: Any, name: str, urls: list[str], **config: Any) -> None:
    """A paused task with a push config per URL, then resumed: its updates are pushed."""
    async with httpx.AsyncClient(timeout=10) as http:
        card = await A2ACardResolver(http, server.url).get_agent_card()
        client = ClientFactory(
            ClientConfig(
                streaming=False,
                httpx_client=http,
                supported_protocol_bindings=["JSONRPC"],
                grpc_channel_factory=grpc.aio.insecure_channel,
            )
        ).create(card)
        [paused] = [e async for e in client.send_message(_send(f"tck-input-required-{name}"))]
        task_id = paused.task.id
        for n, url in enumerate(urls):
            await client.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(task_id=task_id, id=f"hook-{n}", url=url, **config)
            )
        [e async for e in client.send_message(_send(f"go-{name}", task_id=task_id))]


async def _until(done: Callable[[], bool], what: str, *state: object) -> None:
    for _ in range(400):
        if done():
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"{what} did not happen: {state}")


def _got(receiver: Receiver, path: str) -> list[dict[str, Any]]:
    """The updates ``receiver`` got at ``path``."""
    return [json.loads(body) for p, _, body in receiver.received if p == path]


def _completed(updates: list[dict[str, Any]]) -> bool:
    states = [u.get("statusUpdate", {}).get("status", {}).get("state") for u in updates]
    return "TASK_STATE_COMPLETED" in states


def _pushed(receiver: Receiver) -> int | None:
    """How many updates reached the control webhook, once the completed one did."""
    got = _got(receiver, "/control")
    return len(got) if _completed(got) else None


def test_a_name_that_rebinds_still_reaches_only_the_checked_address(thread_server: Any) -> None:
    resolver = StubResolver({"hook.test": ["127.0.0.1", "127.0.0.2"]})
    push = a2a.PushSender(allow=["127.0.0.1/32"], backoff=0.05)
    server = _serve(thread_server, push, resolver)
    webhook, internal = Receiver(), Receiver()
    port = 0

    async def main() -> None:
        nonlocal port
        port = await webhook.start("127.0.0.1")
        await internal.start("127.0.0.2", port)
        try:
            control = f"http://127.0.0.1:{port}/control"
            urls = [f"http://hook.test:{port}/hook", control]
            await _push_updates(server, "dns", urls, token="tok")
            # Every update went to both webhooks: the counts meet.
            await _until(
                lambda: (
                    (_pushed(webhook) or 0) >= 2
                    and len(_got(webhook, "/hook"))
                    + push.counts["refused"]
                    + len(internal.received)
                    == _pushed(webhook)
                ),
                "the deliveries to hook.test",
                push.counts,
            )
        finally:
            webhook.close()
            internal.close()

    run_asyncio(main, 30)
    assert internal.received == []  # the rebound address never got a byte of a request
    hooked = [h for p, h, _ in webhook.received if p == "/hook"]
    assert hooked and {h["host"] for h in hooked} == {f"hook.test:{port}"}
    # One lookup per delivery: the connection used the check's answer. Every
    # lookup that came out 127.0.0.2 ended that delivery unsent.
    assert resolver.calls["hook.test"] == len(hooked) + push.counts["refused"]
    assert push.counts["refused"] >= 1 and push.counts["failed"] == 0


def test_redirects_are_followed_only_to_allowed_addresses(thread_server: Any) -> None:
    resolver = StubResolver(
        {"hook.test": ["127.0.0.1"], "other.test": ["127.0.0.1"], "internal.test": ["127.0.0.2"]}
    )
    push = a2a.PushSender(allow=["127.0.0.1/32"], backoff=0.05)
    server = _serve(thread_server, push, resolver)
    internal = Receiver()
    port = 0

    def answer(path: str) -> bytes:
        to = {
            "/inside": f"http://127.0.0.2:{port}/internal",  # a literal private address
            "/named": f"http://internal.test:{port}/internal",  # a name for a private one
            "/same": "/final",  # same origin: followed, with the credentials
            "/away": f"http://other.test:{port}/final",  # another origin: without them
        }.get(path)
        if to is None:
            return b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n"
        return b"HTTP/1.1 307 Temporary Redirect\r\ncontent-length: 0\r\nlocation: %s\r\n" % (
            to.encode()
        )

    webhook = Receiver(answer)

    async def main() -> None:
        nonlocal port
        port = await webhook.start("127.0.0.1")
        await internal.start("127.0.0.2", port)
        try:
            base = f"http://hook.test:{port}"
            paths = ["/inside", "/named", "/same", "/away", "/control"]
            await _push_updates(
                server,
                "redirect",
                [base + p for p in paths],
                token="tok",
                authentication=pb.AuthenticationInfo(scheme="Bearer", credentials="s3cret"),
            )
            await _until(
                lambda: (
                    (n := _pushed(webhook)) is not None
                    and len(_got(webhook, "/final")) == 2 * n
                    and push.counts["refused"] == 2 * n
                ),
                "the redirected deliveries",
                push.counts,
                [(p, h["host"]) for p, h, _ in webhook.received],
            )
        finally:
            webhook.close()
            internal.close()

    run_asyncio(main, 30)
    assert internal.received == []
    finals = [(h["host"], h.get("authorization")) for p, h, _ in webhook.received if p == "/final"]
    assert (f"hook.test:{port}", "Bearer s3cret") in finals  # same origin: credentials kept
    assert (f"other.test:{port}", None) in finals  # another origin: credentials dropped
    assert all(
        "x-a2a-notification-token" not in h
        for p, h, _ in webhook.received
        if h["host"].startswith("other.test")
    )
    assert push.counts["failed"] == 0


def test_https_keeps_the_name_for_sni_host_and_the_certificate(
    thread_server: Any, tmp_path: Path
) -> None:
    ca = make_ca(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(ca.server.certfile, ca.server.keyfile)
    resolver = StubResolver({"localhost": ["127.0.0.1"]})
    push = a2a.PushSender(
        allow=["127.0.0.1/32"],
        backoff=0.05,
        ssl_context=ssl.create_default_context(cafile=ca.cafile),
    )
    server = _serve(thread_server, push, resolver)
    webhook = Receiver()
    port = 0
    tls.sni_callback = lambda sock, name, ctx: webhook.server_names.append(name)  # type: ignore[assignment,misc,return-value]

    async def main() -> None:
        nonlocal port
        port = await webhook.start("127.0.0.1", tls=tls)
        try:
            await _push_updates(server, "tls", [f"https://localhost:{port}/control"])
            await _until(
                lambda: (
                    _pushed(webhook) is not None
                    and push.counts["delivered"] == len(webhook.received)
                ),
                "the deliveries",
                push.counts,
            )
        finally:
            webhook.close()

    run_asyncio(main, 30)
    # At least once: a delivery whose answer came late on a loaded machine is
    # sent again, so the webhook may hold one more than the sender counted.
    assert push.counts["failed"] == push.counts["refused"] == 0
    assert 0 < push.counts["delivered"] <= len(webhook.received)
    assert webhook.server_names and set(webhook.server_names) == {"localhost"}
    assert {h["host"] for _, h, _ in webhook.received} == {f"localhost:{port}"}
