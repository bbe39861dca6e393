"""``uamp serve --proxy-headers``: the client and scheme a trusted reverse proxy reports.

Behind nginx or a load balancer every connection comes from the proxy; it
names the real client in ``X-Forwarded-For`` and the scheme it was reached
by in ``X-Forwarded-Proto``. Those headers are believed only from a peer in
``--forwarded-allow-ips`` (addresses or networks, ``*`` for any; default
``127.0.0.1``, as uvicorn): from anyone else they are a client's claim and
ignored. ``X-Forwarded-For`` is read from the right (each proxy appends the
address it saw): the first address that is not itself a trusted proxy is the
client. The request's ``client`` and ``scheme`` are rewritten before every
other middleware, so the access log, metrics, rate limits and generated URLs
see the real client.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from .middleware import Call, Next, Reply

__all__ = ["ProxyHeaders"]

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class ProxyHeaders:
    """Middleware: believe ``X-Forwarded-For``/``-Proto`` from the trusted proxies only.

    Args:
        trusted: Addresses or networks (``10.0.0.0/8``), or ``*`` for any peer.

    Raises:
        ValueError: An entry that is not an address or a network (one line).
    """

    def __init__(self, trusted: Iterable[str] = ("127.0.0.1",)) -> None:
        self.any = False
        self.networks: list[_Network] = []
        for entry in trusted:
            for item in filter(None, (part.strip() for part in entry.split(","))):
                if item == "*":
                    self.any = True
                    continue
                try:
                    self.networks.append(ipaddress.ip_network(item, strict=False))
                except ValueError:
                    raise ValueError(
                        f"--forwarded-allow-ips: {item!r} is not an address or a network"
                    ) from None

    def trusts(self, host: str) -> bool:
        """Whether ``host`` is one of the trusted proxies."""
        if self.any:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in network for network in self.networks)

    def client(self, forwarded_for: str) -> str | None:
        """The client an ``X-Forwarded-For`` value names (read from the right), if any."""
        hops = [hop.strip() for hop in forwarded_for.split(",") if hop.strip()]
        for hop in reversed(hops):
            if not self.trusts(hop):
                return hop
        return hops[0] if hops else None

    async def __call__(self, call: Call, call_next: Next) -> Reply:
        request = call.request
        peer = request.client
        if peer is not None and self.trusts(peer[0]):
            proto = request.headers.get("x-forwarded-proto")
            if proto:
                scheme = proto.split(",")[-1].strip().lower()
                if scheme in ("http", "https"):
                    request.scheme = scheme
                elif scheme in ("ws", "wss"):
                    request.scheme = "https" if scheme == "wss" else "http"
            forwarded = ",".join(request.headers.get_all("x-forwarded-for"))
            client = self.client(forwarded) if forwarded else None
            if client is not None:
                request.client = (client, 0)
        return await call_next(call)
