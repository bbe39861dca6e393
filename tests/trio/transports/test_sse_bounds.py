"""A principal's UAMP HTTP+SSE sessions are bounded (issue 29).

uamp's own HTTP+SSE client (:func:`uamp_trio.client.sse.connect_sse`)
against a real server on 127.0.0.1 with JWT authentication: a principal gets
``sse_max_sessions`` sessions, then 429 ``too_many_sessions`` (another
principal still opens its own, and ending one makes room); a session left
with no stream and no POST expires after ``sse_session_idle_timeout``. On
cb59486 1,500 abandoned sessions pinned +141 MB.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

from tests._support.wire import CREATE
from tests.trio.trust.issuer import Issuer
from uamp_proto.principal import Principal
from uamp_trio import DemoAgent, Server
from uamp_trio.app import App, create_app
from uamp_trio.client.uamp import ClientError, connect_sse

ISSUER = Issuer()
TIMEOUT = 20


@asynccontextmanager
async def serving(tmp_path: Path, **config: object) -> AsyncIterator[tuple[App, str]]:
    app = create_app([DemoAgent()], authenticator=ISSUER.authenticator(tmp_path))
    server = Server(app, port=0, shutdown_grace=0.5, **config)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield app, f"http://127.0.0.1:{server.port}"
        nursery.cancel_scope.cancel()


def _auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {ISSUER.token(who)}"}


def _held(app: App, who: str) -> int:
    return app.stores.http_sessions.held_by(Principal(id=who, scheme="jwt"))


async def test_a_principal_gets_its_quota_of_sessions_and_no_more(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving(tmp_path, sse_max_sessions=3) as (app, url),
            connect_sse(url, headers=_auth("alice")) as alice,
            connect_sse(url, headers=_auth("bob")) as bob,
        ):
            sessions = [await alice.create_session("demo") for _ in range(3)]
            for _ in range(3):  # refused every time, and nothing is kept
                with pytest.raises(ClientError) as refused:
                    await alice.create_session("demo")
                assert refused.value.code == "too_many_sessions"
                assert "at most 3" in str(refused.value)
            assert _held(app, "alice") == 3
            # The status is 429, in the error body every HTTP+SSE refusal has.
            async with httpx.AsyncClient() as http:
                raw = await http.post(
                    url + "/agents/demo/events", json=CREATE, headers=_auth("alice")
                )
            assert raw.status_code == 429
            assert raw.json()["error"]["code"] == "too_many_sessions"
            assert raw.json()["accepted"] == 0
            # Only alice is at her limit; her sessions still answer.
            await bob.create_session("demo")
            result = await sessions[0].ask("hello")
            assert result.text == "You said: hello"
            # Ending one makes room for another.
            await sessions[1].end()
            with trio.fail_after(5):
                while _held(app, "alice") == 3:
                    await trio.sleep(0.02)
            await alice.create_session("demo")


async def test_abandoned_sessions_expire_and_free_the_quota(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving(tmp_path, sse_max_sessions=2, sse_session_idle_timeout=0.5) as (app, url),
            httpx.AsyncClient(base_url=url, headers=_auth("carol")) as http,
        ):
            # Opened and left: no stream is ever attached, no POST follows.
            for _ in range(2):
                opened = await http.post("/agents/demo/events", json=CREATE)
                assert opened.status_code == 200
            assert (await http.post("/agents/demo/events", json=CREATE)).status_code == 429
            with trio.fail_after(10):
                while _held(app, "carol"):
                    await trio.sleep(0.05)
            gone = await http.post(
                "/agents/demo/events",
                json={"type": "ping"},
                headers={"x-session-id": opened.headers["x-session-id"]},
            )
            assert gone.status_code == 404
            assert (await http.post("/agents/demo/events", json=CREATE)).status_code == 200
