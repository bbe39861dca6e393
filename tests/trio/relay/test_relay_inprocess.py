"""The relay and the daemon as libraries, over real sockets on 127.0.0.1.

Who may register (no authentication: loopback; with it: a credential bound
to the agent), a refused daemon's one-line error, 100 agents on one socket,
a second registration replacing the first, and a daemon's stop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent
from uamp_trio.relay.daemon import Daemon, DaemonRefused
from uamp_trio.trust.auth import APIKeyAuthenticator

TIMEOUT = 20


async def ask(base: str, agent: str, text: str, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
        return await http.post(
            f"/agents/{agent}/chat/completions",
            json={"messages": [{"role": "user", "content": text}]},
            headers=headers,
        )


async def listing(base: str, **headers: str) -> dict[str, str]:
    async with httpx.AsyncClient(base_url=base) as http:
        agents = (await http.get("/agents", headers=headers)).json()["agents"]
    return {a["name"]: a["state"] for a in agents}


async def test_one_socket_carries_a_hundred_agents(serve_app: Any, nursery: trio.Nursery) -> None:
    app = create_app([], relay=True)
    server = await serve_app(app)
    daemon = Daemon(server.url, [DemoAgent(f"agent{n:03d}") for n in range(100)])
    nursery.start_soon(daemon.run)
    with trio.fail_after(TIMEOUT):
        await daemon.connected.wait()
        states = await listing(server.url)
        assert len(states) == 100 and set(states.values()) == {"online"}
        for n in (0, 57, 99):
            reply = await ask(server.url, f"agent{n:03d}", f"hi {n}")
            assert reply.json()["choices"][0]["message"]["content"] == f"You said: hi {n}"
    assert daemon.connections == 1
    daemon.stop()


def keyed_app(tmp_path: Path) -> Any:
    keys = tmp_path / "keys"
    keys.write_text("agent:alpha:key-alpha\nalice:key-alice\n")
    return create_app([], relay=True, authenticator=APIKeyAuthenticator.from_file(keys))


async def test_with_auth_only_a_credential_bound_to_the_agent_registers_it(
    serve_app: Any, nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await serve_app(keyed_app(tmp_path))
    with trio.fail_after(TIMEOUT):
        # A user's key is a client credential: it registers nothing.
        with pytest.raises(DaemonRefused, match=r"refused every agent: alpha \(forbidden\)"):
            await Daemon(server.url, [DemoAgent("alpha")], token="key-alice").run()
        # A key of agent alpha may not register beta.
        with pytest.raises(DaemonRefused, match="beta"):
            await Daemon(server.url, [DemoAgent("beta")], token="key-alpha").run()
        # A wrong key is refused at the upgrade.
        with pytest.raises(DaemonRefused, match="refused the credential"):
            await Daemon(server.url, [DemoAgent("alpha")], token="nope").run()
        assert await listing(server.url, authorization="Bearer key-alice") == {}
        daemon = Daemon(server.url, [DemoAgent("alpha")], token="key-alpha")
        nursery.start_soon(daemon.run)
        await daemon.connected.wait()
        reply = await ask(server.url, "alpha", "bound", authorization="Bearer key-alice")
        assert reply.json()["choices"][0]["message"]["content"] == "You said: bound"
        # Clients still need their own credential.
        assert (await ask(server.url, "alpha", "anonymous")).status_code == 401
    daemon.stop()


async def test_a_per_agent_token_on_an_open_upgrade(
    serve_app: Any, nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await serve_app(keyed_app(tmp_path))
    # No connection credential: the upgrade defers to each session.create's token.
    daemon = Daemon(server.url, [DemoAgent("alpha")], tokens={"alpha": "key-alpha"})
    nursery.start_soon(daemon.run)
    with trio.fail_after(TIMEOUT):
        await daemon.connected.wait()
        assert await listing(server.url, authorization="Bearer key-alice") == {"alpha": "online"}
    daemon.stop()


async def test_a_second_registration_replaces_the_first(
    serve_app: Any, nursery: trio.Nursery
) -> None:
    server = await serve_app(create_app([], relay=True))
    first = Daemon(server.url, [DemoAgent("alpha")])
    nursery.start_soon(first.run)
    with trio.fail_after(TIMEOUT):
        await first.connected.wait()
        second = Daemon(f"{server.url}/agents/connect", [DemoAgent("alpha")])
        nursery.start_soon(second.run)
        await second.connected.wait()
        assert (await listing(server.url)) == {"alpha": "online"}
        reply = await ask(server.url, "alpha", "after")
        assert reply.json()["choices"][0]["message"]["content"] == "You said: after"
        # The older daemon's registration ended; stopping the newer one leaves alpha offline.
        second.stop()
        while (await listing(server.url)).get("alpha") != "offline":
            await trio.sleep(0.05)
    first.stop()


async def test_a_name_hosted_by_the_relay_itself_makes_the_connection_a_client(
    serve_app: Any, nursery: trio.Nursery
) -> None:
    server = await serve_app(create_app([DemoAgent("local")], relay=True))
    with trio.fail_after(TIMEOUT):
        # On /ws the connection becomes a client of 'local'; on /agents/connect it is refused.
        with pytest.raises(DaemonRefused, match=r"local \(name_taken\)"):
            await Daemon(f"{server.url}/agents/connect", [DemoAgent("local")]).run()
        assert await listing(server.url) == {"local": "online"}


async def test_uamp_clients_of_a_daemon_that_vanishes_get_agent_offline(
    serve_app: Any, nursery: trio.Nursery
) -> None:
    from trio_websocket import open_websocket_url

    from tests._support.relay_agents import SlowAgent
    from tests._support.wire import ask as ask_ws
    from tests._support.wire import create_session, recv, send

    server = await serve_app(create_app([], relay=True))
    daemon = Daemon(server.url, [SlowAgent("slow")])
    daemon_scope = trio.CancelScope()

    async def run_daemon() -> None:
        with daemon_scope:
            await daemon.run()

    nursery.start_soon(run_daemon)
    ws_url = server.url.replace("http://", "ws://") + "/ws"
    with trio.fail_after(TIMEOUT):
        await daemon.connected.wait()
        async with open_websocket_url(ws_url) as ws:
            sid = await create_session(ws, agent="slow")
            await ask_ws(ws, "go", session_id=sid)
            deltas = 0
            while deltas < 2:
                deltas += (await recv(ws))["type"] == "response.delta"
            daemon_scope.cancel()  # the daemon's process is gone: its socket just closes
            seen = []
            while not seen or seen[-1]["type"] != "session.error":
                seen.append(await recv(ws))
            errors = [(e["type"], e["error"]["code"]) for e in seen if "error" in e]
            assert errors == [
                ("response.error", "agent_offline"),
                ("session.error", "agent_offline"),
            ]
            await send(ws, type="session.create", uamp_version="1.0", session={"agent": "slow"})
            refused = await recv(ws)
            assert refused["type"] == "session.error"
            assert refused["error"]["code"] == "agent_offline"


class _Flood(DemoAgent):
    """As many one-word deltas as the user's text says."""

    async def respond(self, request: Any, emit: Any) -> None:
        from uamp_proto import events as ev
        from uamp_proto import types as ty

        for _ in range(int(request.messages[-1].text)):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text="w ")))


async def test_a_slow_client_slows_the_daemon_down_instead_of_losing_events(
    serve_app: Any, nursery: trio.Nursery
) -> None:
    from uamp_trio.client import connect
    from uamp_trio.relay.platform import RelayLimits

    server = await serve_app(create_app([], relay=RelayLimits(max_queued_events=64)))
    daemon = Daemon(server.url, [_Flood("flood")])
    nursery.start_soon(daemon.run)
    with trio.fail_after(TIMEOUT):
        await daemon.connected.wait()
        async with connect(server.url.replace("http://", "ws://") + "/ws") as client:
            session = await client.create_session(agent="flood")
            deltas, last = 0, ""
            async for event in session.respond("3000"):
                if event.type == "response.delta":
                    deltas += 1
                    if deltas < 200:
                        await trio.sleep(0.001)  # far slower than the daemon writes
                last = event.type
                if last in ("response.done", "response.error"):
                    break
    # Before the relay paused reading a daemon that outran its client, the
    # 4097th queued event failed the turn with 'overloaded' (here the 65th).
    assert (deltas, last) == (3000, "response.done")
    daemon.stop()


class _Watched(DemoAgent):
    """Streams until cancelled, and records that the cancel reached it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.cancelled = trio.Event()

    async def respond(self, request: Any, emit: Any) -> None:
        from uamp_proto import events as ev
        from uamp_proto import types as ty

        try:
            while True:
                await emit(ev.ResponseDelta(delta=ty.DeltaText(text="more ")))
                await trio.sleep(0.01)
        except trio.Cancelled:
            self.cancelled.set()
            raise


async def test_a_client_cancel_reaches_the_agent_on_the_daemon(
    serve_app: Any, nursery: trio.Nursery
) -> None:
    from uamp_trio.client import connect

    agent = _Watched("watched")
    server = await serve_app(create_app([], relay=True))
    daemon = Daemon(server.url, [agent])
    nursery.start_soon(daemon.run)
    with trio.fail_after(TIMEOUT):
        await daemon.connected.wait()
        async with connect(server.url.replace("http://", "ws://") + "/ws") as client:
            session = await client.create_session(agent="watched")
            seen = 0
            async for event in session.respond("go"):
                seen += event.type == "response.delta"
                if seen == 3:
                    await session.cancel()
                if event.type == "response.cancelled":
                    break
        await agent.cancelled.wait()  # the agent's own task saw the cancel
    assert agent.cancelled.is_set()
    daemon.stop()


@pytest.mark.parametrize(
    "frame",
    [
        b'{"event": {"type": "input.text", "text": "hi", "session_id": "SID"}, "chatId": "c"}',
        b'["input.text"]',
        b"not json",
        b'{"text": "hi", "session_id": "SID"}',
        b'{"type": 7, "text": "hi", "session_id": "SID"}',
    ],
    ids=["broadcast", "array", "junk", "no type", "type not a string"],
)
async def test_a_daemon_starts_turns_only_on_a_typed_input_text(
    nursery: trio.Nursery, frame: bytes
) -> None:
    import orjson

    from uamp_trio.engines.ws_frames import make_engine
    from uamp_trio.hosting.sessions import SessionLimits
    from uamp_trio.relay.daemon import DaemonHost

    host = DaemonHost(
        nursery,
        {"alpha": DemoAgent("alpha")},
        {"alpha": None},
        make_engine(client=True, max_message_size=None),
        SessionLimits(),
    )
    create = orjson.loads((await host.outbox.take())[0])
    sid = create["session_id"]
    assert create["type"] == "session.create" and create["session"]["agent"] == "alpha"
    host.feed(
        orjson.dumps(
            {
                "type": "session.created",
                "session_id": sid,
                "uamp_version": "1.0",
                "session": {"id": sid},
                "agent": "alpha",
            }
        )
    )
    assert [orjson.loads(m)["type"] for m in await host.outbox.take()] == ["capabilities"]
    host.feed(frame.replace(b"SID", sid.encode()))
    await trio.sleep(0.05)
    assert len(host.outbox) == 0  # nothing started
    host.feed(orjson.dumps({"type": "input.text", "session_id": sid, "text": "hi"}))
    sent: list[str] = []
    while not sent or sent[-1] != "response.done":
        sent += [orjson.loads(m)["type"] for m in await host.outbox.take()]
    assert sent[0] == "response.created" and "response.delta" in sent


async def test_the_per_daemon_limits_are_enforced(serve_app: Any, nursery: trio.Nursery) -> None:
    from tests._support.relay_agents import SlowAgent
    from uamp_trio.client import connect
    from uamp_trio.relay.platform import RelayLimits

    server = await serve_app(create_app([], relay=RelayLimits(max_agents=2, max_sessions=1)))
    daemon = Daemon(server.url, [SlowAgent("s1"), DemoAgent("d2"), DemoAgent("d3")])
    nursery.start_soon(daemon.run)
    with trio.fail_after(TIMEOUT):
        await daemon.connected.wait()
        # The third registration on one socket is refused; the first two serve.
        assert await listing(server.url) == {"s1": "online", "d2": "online"}
        async with connect(server.url.replace("http://", "ws://") + "/ws") as client:
            slow = await client.create_session(agent="s1")
            other = await client.create_session(agent="d2")
            stream = slow.respond("go")
            async for event in stream:
                if event.type == "response.delta":
                    break  # one turn now runs on the daemon
            refused = await other.ask("hi")
            assert refused.error is not None and refused.error.code == "too_many_sessions"
            await slow.cancel()
            async for event in stream:
                if event.type == "response.cancelled":
                    break
            assert (await other.ask("hi")).text == "You said: hi"
    daemon.stop()
