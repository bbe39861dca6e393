"""A2A push notifications: task updates POSTed to the webhooks clients configured (A2A 1.0 4.3).

Theory of operation
-------------------
A client attaches push-notification configs to a task (``url``, an optional
``token`` and ``authentication``). :class:`PushSender` is told of every
update of such a task (:meth:`PushSender.notify`) and POSTs it to each
config's URL as a 1.0 ``StreamResponse`` (``{"statusUpdate": ...}`` or
``{"artifactUpdate": ...}``), in the server's background nursery so the
task never waits for a webhook. Deliveries to one webhook go out one at a
time, in the order :meth:`PushSender.notify` was called: each config of a
task has one queue and at most one task draining it (a lock per update
would not do: trio starts the tasks spawned in one scheduler step in a
random order, so a turn that ends without a checkpoint could push its
``completed`` before its ``working``). A webhook slower than its task
cannot make the server hold the whole stream: a queue keeps at most
``max_queued`` updates; past that the oldest artifact update waiting is
dropped (a status update only when no artifact update waits), so the
state changes and the task's end still reach the receiver, which can get
the whole task with ``GetTask``. A request carries
``Authorization: <scheme> <credentials>`` when the config names
authentication, and ``X-A2A-Notification-Token`` when it has a token. A
failed delivery (a connection error, a timeout, a 5xx or 429) is retried
with exponential backoff, at most :attr:`PushSender.attempts` times; a 4xx
is final.

SSRF: a webhook is a URL the *client* chose that the *server* fetches, so
targets in private, loopback, link-local and other non-public ranges are
refused -- when the config is set (a literal address, ``localhost``) and
again at delivery (the addresses the name resolves to) -- unless an
allow-list (``allow=["127.0.0.1/32"]``) admits them. A refused target is an
``INVALID_PARAMS`` error when set and a skipped delivery (logged) later.
A delivery connects to the address its check saw, and follows a redirect
only to an address that passes the same check (:mod:`.pinned`: a name that
resolves differently the second time -- DNS rebinding -- gains nothing).

The sender is written on anyio and imports no event loop: ``uamp serve``
runs it under Trio, and the ASGI app (``uamp_asgi.Config.a2a_push``, one by
default) on asyncio, where deliveries run in the task group of the request
whose turn made the update.
"""

from __future__ import annotations

import ipaddress
import logging
import ssl
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
import orjson

from uamp_proto.adapters import a2a
from uamp_proto.adapters.a2a import A2AError, A2ATask, Dialect, Update

from .pinned import Refused, Resolve, post_checked, resolve

if TYPE_CHECKING:
    from .background import Spawner

__all__ = ["PushSender"]

log = logging.getLogger("uamp_stores.a2a_push")

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: A delivery waiting for its webhook: the config, the body, whether it is a status update.
_Queued = tuple[dict[str, Any], bytes, bool]


class PushSender:
    """Delivers task updates to push-notification webhooks.

    Args:
        allow: Networks (CIDR strings) whose addresses may be targets although
            they are not public (e.g. ``["127.0.0.1/32"]`` for a local receiver).
        attempts: Deliveries tried per update before giving up.
        backoff: Seconds before the first retry; doubled for each next one.
        timeout: Seconds one delivery may take.
        resolver: Resolves a target's name, once per delivery attempt
            (default: anyio's ``getaddrinfo``; under Trio, Trio's and its
            custom resolver).
        ssl_context: Verifies ``https`` receivers (default: the system's CAs).
        max_queued: Updates waiting for one webhook of a task at most.
    """

    def __init__(
        self,
        allow: Iterable[str] = (),
        *,
        attempts: int = 4,
        backoff: float = 0.5,
        timeout: float = 15.0,
        resolver: Resolve = resolve,
        ssl_context: ssl.SSLContext | None = None,
        max_queued: int = 256,
    ) -> None:
        self.allow: list[_Network] = [ipaddress.ip_network(a, strict=False) for a in allow]
        self.attempts = attempts
        self.backoff = backoff
        self.timeout = timeout
        self.resolver = resolver
        self.ssl_context = ssl_context
        self.max_queued = max_queued
        #: Per (task, config): the deliveries not made yet, oldest first; a
        #: key is here exactly while one ``_deliver`` task drains it.
        self._queues: dict[tuple[str, str], deque[_Queued]] = {}
        #: Deliveries made, by outcome (``delivered``, ``failed``, ``refused``),
        #: and updates ``dropped`` from a full queue.
        self.counts: dict[str, int] = {"delivered": 0, "failed": 0, "refused": 0, "dropped": 0}

    def _allowed(self, address: str) -> bool:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if any(ip in net for net in self.allow):
            return True
        return ip.is_global

    def check_target(self, url: str) -> None:
        """Refuse a webhook URL whose host is plainly not public (and not allow-listed).

        Raises:
            A2AError: ``INVALID_PARAMS``.
        """
        host = (urlsplit(url).hostname or "").lower()
        if not host:
            raise A2AError(a2a.INVALID_PARAMS, "The push-notification 'url' has no host.")
        if host == "localhost" or host.endswith(".localhost"):
            host = "127.0.0.1"
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return  # a name: checked against what it resolves to at delivery
        if not self._allowed(host):
            raise A2AError(
                a2a.INVALID_PARAMS,
                f"The push-notification 'url' targets {host}, a non-public address this "
                "server does not deliver to.",
            )

    def notify(self, nursery: Spawner | None, task: A2ATask, update: Update) -> None:
        """Deliver ``update`` of ``task`` to each of its webhooks, in the background.

        ``nursery``: where deliveries run (a Trio nursery, an anyio task group).
        """
        if nursery is None:
            return  # no server around the app: nowhere to run deliveries
        payload = orjson.dumps(a2a.render_update(update, Dialect.V1))
        status = update.kind == "status"
        for config in list(task.push_configs.values()):
            key = (task.id, config["id"])
            queue = self._queues.get(key)
            if queue is not None:  # its drain is running: it takes this one next
                if len(queue) >= self.max_queued:
                    self._drop_one(key, queue)
                queue.append((dict(config), payload, status))
                continue
            self._queues[key] = deque([(dict(config), payload, status)])
            nursery.start_soon(self._deliver, key)

    def _drop_one(self, key: tuple[str, str], queue: deque[_Queued]) -> None:
        """Make room in a full queue: its oldest artifact update, else its oldest update."""
        for index, (_, _, status) in enumerate(queue):
            if not status:
                del queue[index]
                break
        else:
            queue.popleft()
        if not self.counts["dropped"] % 1000:  # the first drop, then every thousandth
            log.warning(
                "push notifications to a webhook of task %s fall behind; dropping updates",
                key[0],
            )
        self.counts["dropped"] += 1

    async def _deliver(self, key: tuple[str, str]) -> None:
        """Post the queued updates of one webhook of a task, in order, until none is left."""
        queue = self._queues[key]
        try:
            while queue:
                config, payload, _ = queue.popleft()
                await self._post(config, payload)
        finally:
            del self._queues[key]

    async def _post(self, config: dict[str, Any], payload: bytes) -> None:
        url = config["url"]
        headers = [("content-type", "application/json")]
        auth = config.get("authentication")
        if auth is not None:
            credentials = auth.get("credentials") or config.get("token") or ""
            headers.append(("authorization", f"{auth['scheme']} {credentials}".strip()))
        if config.get("token"):
            headers.append(("x-a2a-notification-token", config["token"]))
        delay = self.backoff
        import httpcore  # here: a server that never pushes does not pay for its import

        for attempt in range(1, self.attempts + 1):
            try:
                answer = await post_checked(
                    url,
                    payload,
                    headers,
                    allowed=self._allowed,
                    resolver=self.resolver,
                    timeout=self.timeout,
                    ssl_context=self.ssl_context,
                )
            except Refused as exc:
                self.counts["refused"] += 1
                log.warning("push notification not sent: %s", exc)
                return
            except (
                OSError,
                TimeoutError,
                httpcore.NetworkError,
                httpcore.TimeoutException,
                httpcore.ProtocolError,
            ) as exc:
                reason = type(exc).__name__
            else:
                if answer.status < 300:
                    self.counts["delivered"] += 1
                    return
                reason = f"HTTP {answer.status}"
                if answer.status < 500 and answer.status != 429:
                    break  # the receiver refused it (or redirected for good): final
            if attempt < self.attempts:
                await anyio.sleep(delay)
                delay *= 2
        self.counts["failed"] += 1
        log.warning("push notification to %s failed (%s)", urlsplit(url).hostname, reason)
