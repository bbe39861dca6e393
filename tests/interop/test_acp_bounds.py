"""What one principal can keep in an ACP server is bounded, on every carrier (issue 29).

agent-client-protocol's own client over the WebSocket carrier (and over
stdio, ``uamp acp`` as a subprocess), JSON-RPC over plain HTTP: a principal
gets ``acp_max_sessions`` sessions and then JSON-RPC ``-32029`` (another
principal still gets its own), a ``cwd`` or ``mcpServers`` past
``acp_max_session_bytes`` is ``-32602`` naming the field and is not kept,
and a session unused for ``acp_session_idle_timeout`` is forgotten (a store
clock the test moves). On cb59486 120 ``session/new`` with a 1 MiB ``cwd``
pinned +124 MB: every one was kept, for ever.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import acp
import httpx
import pytest
from acp.ws import create_websocket_stream

from tests._support.agents import run_asyncio
from tests.trio.trust.issuer import Issuer
from uamp_proto.principal import Principal
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent
from uamp_trio.stores import Stores
from uamp_trio.stores.acp_sessions import AcpSessionStore

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ROOT = Path(__file__).resolve().parents[2]
ISSUER = Issuer()
LIMITS = {"acp_max_sessions": 3, "acp_max_session_bytes": 4096, "acp_session_idle_timeout": 60.0}
MIB = "/" + "d" * (1024 * 1024)


class _Quiet:
    """An ACP client that ignores what it is told."""

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        pass

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise acp.RequestError.method_not_found("session/request_permission")

    def on_connect(self, conn: Any) -> None:
        pass


class _Clock:
    """The store's clock, moved by the test (the idle timeout is a minute)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> _Clock:
    return _Clock()


@pytest.fixture
def store(clock: _Clock) -> AcpSessionStore:
    return AcpSessionStore(clock=clock)


@pytest.fixture
def server(thread_server: Any, tmp_path: Path, store: AcpSessionStore) -> Any:
    app = create_app(
        [DemoAgent()],
        authenticator=ISSUER.authenticator(tmp_path),
        stores=Stores(acp_sessions=store),
    )
    return thread_server(app, **LIMITS)


async def _connect(server: Any, who: str) -> Any:
    url = server.url.replace("http", "ws") + "/agents/demo/acp/stream"
    transport = await create_websocket_stream(
        url, headers={"Authorization": f"Bearer {ISSUER.token(who)}"}
    )
    conn = acp.connect_to_agent(_Quiet(), transport)
    await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
    return conn


def _held(store: AcpSessionStore, who: str) -> int:
    return store.held_by(Principal(id=who, scheme="jwt"))


def test_a_principal_gets_its_quota_of_sessions_and_no_more(
    server: Any, store: AcpSessionStore
) -> None:
    async def main() -> None:
        alice, bob = await _connect(server, "alice"), await _connect(server, "bob")
        try:
            made = [(await alice.new_session(cwd="/", mcp_servers=[])).session_id for _ in "abc"]
            for _ in range(5):  # refused every time, not once
                with pytest.raises(acp.RequestError) as refused:
                    await alice.new_session(cwd="/", mcp_servers=[])
                assert refused.value.code == -32029
                assert refused.value.data == {
                    "status": 429,
                    "code": "too_many_sessions",
                    "limit": 3,
                }
            # Only alice is at her limit: bob opens his, and alice's still work.
            await bob.new_session(cwd="/", mcp_servers=[])
            reply = await alice.prompt(session_id=made[0], prompt=[acp.text_block("hi")])
            assert reply.stop_reason == "end_turn"
        finally:
            await alice.close()
            await bob.close()
        assert _held(store, "alice") == 3 and _held(store, "bob") == 1

    run_asyncio(main, 30)


def test_a_huge_cwd_or_mcp_servers_is_refused_and_not_kept(
    server: Any, store: AcpSessionStore
) -> None:
    async def main() -> None:
        alice = await _connect(server, "alice")
        try:
            with pytest.raises(acp.RequestError) as cwd:
                await alice.new_session(cwd=MIB, mcp_servers=[])
            assert cwd.value.code == -32602
            assert cwd.value.data == {"param": "params.cwd", "limit": 4096}
            server_spec = acp.schema.McpServerStdio(
                name="big", command="/bin/true", args=["x" * 5000], env=[]
            )
            with pytest.raises(acp.RequestError) as servers:
                await alice.new_session(cwd="/", mcp_servers=[server_spec])
            assert servers.value.code == -32602
            assert servers.value.data == {"param": "params.mcpServers", "limit": 4096}
            assert _held(store, "alice") == 0
            # session/load cannot grow a kept session past the bound either.
            sid = (await alice.new_session(cwd="/work", mcp_servers=[])).session_id
            with pytest.raises(acp.RequestError) as load:
                await alice.load_session(session_id=sid, cwd=MIB, mcp_servers=[])
            assert load.value.code == -32602
            assert store.sessions[sid].cwd == "/work"
        finally:
            await alice.close()

    run_asyncio(main, 30)


def test_an_unused_session_expires_and_frees_the_quota(
    server: Any, store: AcpSessionStore, clock: _Clock
) -> None:
    async def main() -> None:
        alice = await _connect(server, "alice")
        try:
            old = [(await alice.new_session(cwd="/", mcp_servers=[])).session_id for _ in "ab"]
            clock.now += 30
            used = (await alice.new_session(cwd="/", mcp_servers=[])).session_id
            clock.now += 31  # the first two: 61 s unused; the third: 31 s
            fresh = (await alice.new_session(cwd="/", mcp_servers=[])).session_id
            assert set(store.sessions) == {used, fresh}
            with pytest.raises(acp.RequestError) as gone:
                await alice.prompt(session_id=old[0], prompt=[acp.text_block("hi")])
            assert gone.value.code == -32002  # as for an id that never existed
            # Using a session keeps it: a prompt at 59 s restarts its minute.
            clock.now += 28
            await alice.prompt(session_id=used, prompt=[acp.text_block("hi")])
            clock.now += 40
            assert store.expire() == 1  # fresh (68 s unused) goes; used (40 s) stays
            assert list(store.sessions) == [used]
        finally:
            await alice.close()

    run_asyncio(main, 30)


def test_the_http_carrier_is_bounded_alike(server: Any, store: AcpSessionStore) -> None:
    url = server.url + "/agents/demo/acp"
    headers = {"Authorization": f"Bearer {ISSUER.token('carol')}"}

    def new(cwd: str) -> dict[str, Any]:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "session/new",
            "params": {"cwd": cwd, "mcpServers": []},
        }
        answer = httpx.post(url, json=body, headers=headers, timeout=10)
        assert answer.status_code == 200
        return answer.json()  # type: ignore[no-any-return]

    assert new(MIB)["error"]["code"] == -32602
    assert all("result" in new("/") for _ in range(3))
    refused = new("/")["error"]
    assert refused["code"] == -32029 and refused["data"]["code"] == "too_many_sessions"
    assert _held(store, "carol") == 3


def test_uamp_acp_on_stdio_is_bounded_by_its_flags() -> None:
    async def main() -> None:
        spawned = acp.spawn_agent_process(
            _Quiet(),
            sys.executable,
            "-m",
            "uamp_trio",
            "acp",
            "--acp-max-sessions",
            "2",
            "--acp-max-session-bytes",
            "1024",
            cwd=str(ROOT),
        )
        async with spawned as (conn, _process):
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            for _ in range(2):
                await conn.new_session(cwd=str(ROOT), mcp_servers=[])
            with pytest.raises(acp.RequestError) as refused:
                await conn.new_session(cwd=str(ROOT), mcp_servers=[])
            assert refused.value.code == -32029
            with pytest.raises(acp.RequestError) as big:
                await conn.new_session(cwd="/" + "d" * 2000, mcp_servers=[])
            assert big.value.code == -32602

    run_asyncio(main, 60)
