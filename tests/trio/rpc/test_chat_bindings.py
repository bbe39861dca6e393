"""``uamp chat --binding h3|grpc|envelope-http|envelope-ws`` against ``uamp serve --http3``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._support.cli import uamp, uamp_serve
from tests._support.tls import ThrowawayCA, make_ca


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> ThrowawayCA:
    return make_ca(Path(tmp_path_factory.mktemp("ca")))


def test_chat_over_every_envelope_binding(ca: ThrowawayCA) -> None:
    tls = ("--certfile", ca.server.certfile, "--keyfile", ca.server.keyfile, "--http3")
    with uamp_serve(*tls) as url:
        assert url.startswith("https://")
        for binding in ("h3", "grpc", "envelope-http", "envelope-ws"):
            done = uamp(
                "chat",
                "--binding",
                binding,
                url,
                "--agent",
                "demo",
                "--cafile",
                ca.cafile,
                "--once",
                "What is 2+3?",
                timeout=60,
            )
            assert done.returncode == 0, (binding, done.stderr)
            assert "5" in done.stdout, (binding, done.stdout)


def test_a_refusal_is_reported_with_its_code(ca: ThrowawayCA) -> None:
    tls = ("--certfile", ca.server.certfile, "--keyfile", ca.server.keyfile)
    with uamp_serve(*tls) as url:
        done = uamp(
            "chat",
            "--binding",
            "grpc",
            url,
            "--agent",
            "nobody",
            "--cafile",
            ca.cafile,
            "--once",
            "hi",
            timeout=60,
        )
    assert done.returncode == 1
    assert "uamp chat: 4.04:" in done.stderr
