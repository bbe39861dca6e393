"""``uamp serve --proxy-headers``: the client a trusted proxy names, and only a trusted one
(issue 32, item 7)."""

from __future__ import annotations

import sys

import httpx
import pytest

from tests._support.cli import Served
from uamp_trio.hosting.proxy_headers import ProxyHeaders

CHAINS = [
    # (trusted, X-Forwarded-For, the client)
    (["127.0.0.1"], "203.0.113.7", "203.0.113.7"),
    (["127.0.0.1"], "198.51.100.1, 203.0.113.7", "203.0.113.7"),  # the last hop is the client
    (["127.0.0.1,10.0.0.0/8"], "203.0.113.7, 10.1.2.3", "203.0.113.7"),  # skip inner proxies
    (["10.0.0.0/8"], "10.0.0.1, 10.0.0.2", "10.0.0.1"),  # all trusted: the first
    (["*"], "2001:db8::1", "2001:db8::1"),
]


@pytest.mark.parametrize(("trusted", "chain", "client"), CHAINS)
def test_the_client_is_the_last_untrusted_hop(trusted: list[str], chain: str, client: str) -> None:
    assert ProxyHeaders(trusted).client(chain) == client


def test_a_bad_network_is_one_line() -> None:
    with pytest.raises(ValueError, match="--forwarded-allow-ips: 'nope' is not an address"):
        ProxyHeaders(["127.0.0.1,nope"])


@pytest.mark.parametrize(
    ("allow", "logged"), [("127.0.0.1", "203.0.113.7:0"), ("10.0.0.0/8", "127.0.0.1:")]
)
def test_the_access_log_shows_the_client_a_trusted_proxy_names(allow: str, logged: str) -> None:
    command = [sys.executable, "-m", "uamp_trio", "serve", "--port", "0", "--log-level", "info"]
    flags = ["--proxy-headers", "--forwarded-allow-ips", allow]
    with Served([*command, *flags]) as srv:
        headers = {"x-forwarded-for": "203.0.113.7", "x-forwarded-proto": "https"}
        assert httpx.get(srv.url() + "/healthz", headers=headers, timeout=10).status_code == 200
        line = srv.wait_for(r'"GET /healthz HTTP/1.1" 200').string
    assert line.split('"')[0].split()[-1].startswith(logged), line
