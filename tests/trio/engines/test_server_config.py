"""ServerConfig refuses a limit or timeout that is not above zero, naming it."""

from __future__ import annotations

import attrs
import pytest

from uamp_trio.engines.server import ServerConfig

#: Settings with no "above zero" rule: where to listen, the TLS files and
#: options (checked in tests/trio/quic/test_tls_versions.py), a grace period
#: (0 stops at once; negative is refused on its own), and the WebSocket
#: message size, which ServerConfig does not check; the CORS settings
#: (origins, methods, headers and a flag: tests/trio/engines/test_cors.py).
UNBOUNDED = {
    "allowed_origins",
    "allowed_methods",
    "allowed_headers",
    "allow_credentials",
    "host",
    "port",
    "uds",
    "on_busy",
    "certfile",
    "keyfile",
    "tls_min",
    "client_ca",
    "http3",
    "shutdown_grace",
    "websocket_max_message_size",
}
#: Every other setting is a limit or a timeout that must be above zero.
LIMITS = [f.name for f in attrs.fields(ServerConfig) if f.name not in UNBOUNDED]


@pytest.mark.parametrize("name", LIMITS)
@pytest.mark.parametrize("value", [0, -1])
def test_a_limit_not_above_zero_is_refused_by_name(name: str, value: int) -> None:
    with pytest.raises(ValueError, match=f"^{name} must be positive$"):
        ServerConfig(**{name: value})


@pytest.mark.parametrize("name", LIMITS)
def test_a_positive_limit_is_kept(name: str) -> None:
    assert getattr(ServerConfig(**{name: 7}), name) == 7


def test_no_connection_limit_and_no_grace_are_allowed_a_negative_grace_is_not() -> None:
    assert ServerConfig(max_connections=None, shutdown_grace=0).max_connections is None
    with pytest.raises(ValueError, match="shutdown_grace must not be negative"):
        ServerConfig(shutdown_grace=-1)
