"""A relay registration lasts as long as the credential it was made with.

Over real sockets on 127.0.0.1: a daemon registers ``alpha`` with a JWT
that expires in a few seconds; once it has expired the agent is offline
(503 ``agent_offline``) and the daemon is told (``session.end``
``token_expired``). A daemon that refreshes with ``session.update``
(:meth:`Daemon.refresh`) before then keeps serving; a fresh token of another
principal refreshes nothing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.trio.trust.issuer import Issuer
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent
from uamp_trio.relay.daemon import Daemon

TIMEOUT = 30
ISSUER = Issuer()
LIFETIME = 5


def _client() -> dict[str, str]:
    """The asking client's credential, made now (one made at import expires in a long run)."""
    return {"authorization": f"Bearer {ISSUER.token('alice')}"}


async def _ask(base: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
        return await http.post(
            "/agents/alpha/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}]},
            headers=_client(),
        )


async def _state(base: str) -> str:
    async with httpx.AsyncClient(base_url=base) as http:
        agents = (await http.get("/agents", headers=_client())).json()["agents"]
    return next(a["state"] for a in agents if a["name"] == "alpha")


def _daemon_token(sub: str = "daemon-1", lifetime: int = LIFETIME) -> tuple[str, int]:
    exp = int(time.time()) + lifetime
    return ISSUER.token(sub, agent_name="alpha", exp=exp), exp


async def _started(
    serve_app: Any, nursery: trio.Nursery, tmp_path: Path
) -> tuple[Any, Daemon, int]:
    app = create_app([], relay=True, authenticator=ISSUER.authenticator(tmp_path, leeway=0))
    server = await serve_app(app)
    token, exp = _daemon_token()
    daemon = Daemon(server.url, [DemoAgent("alpha")], token=token)
    nursery.start_soon(daemon.run)
    await daemon.connected.wait()
    return server, daemon, exp


async def _after(exp: int) -> None:
    await trio.sleep(max(0.0, exp - time.time()) + 1.0)


async def test_a_registration_ends_when_its_token_expires(
    serve_app: Any, nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with trio.fail_after(TIMEOUT):
        server, daemon, exp = await _started(serve_app, nursery, tmp_path)
        before = await _ask(server.url)
        await _after(exp)
        after = await _ask(server.url)
        state = await _state(server.url)
    assert before.status_code == 200
    assert after.status_code == 503 and after.json()["error"]["code"] == "agent_offline"
    assert state == "offline"
    assert "ended the registration of agent 'alpha' (token_expired)" in caplog.text
    daemon.stop()


async def test_a_refreshed_registration_keeps_serving(
    serve_app: Any, nursery: trio.Nursery, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        server, daemon, exp = await _started(serve_app, nursery, tmp_path)
        fresh, _ = _daemon_token(lifetime=600)
        daemon.refresh(fresh)
        await _after(exp)
        after = await _ask(server.url)
    assert after.status_code == 200, after.text
    assert after.json()["choices"][0]["message"]["content"] == "You said: hi"
    daemon.stop()


async def test_another_principals_token_refreshes_nothing(
    serve_app: Any, nursery: trio.Nursery, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        server, daemon, exp = await _started(serve_app, nursery, tmp_path)
        other, _ = _daemon_token(sub="daemon-2", lifetime=600)
        daemon.refresh(other)
        await _after(exp)
        after = await _ask(server.url)
    assert after.status_code == 503
    daemon.stop()
