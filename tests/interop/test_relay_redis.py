"""Two ``uamp serve --relay`` processes on one Redis: a client of A reaches a daemon connected to B.

Real parts only: a ``redis-server``, two relay processes sharing it
(``--store redis://``), ``uamp connect`` dialling B, and uamp's own UAMP
WebSocket client, the OpenAI SDK and httpx talking to A (docs/relay.md,
"Several relay processes").
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator

import httpx
import openai
import orjson
import pytest
import redis
import trio

from tests._support.cli import spawn_serve, uamp_serve, wait_for_line
from tests._support.haproxy import running_haproxy
from tests.interop.test_relay import TIMEOUT, spawn_daemon, stop, wait_online
from uamp_proto import events as ev
from uamp_trio.client import connect

AGENTS = {"alpha", "slow", "topup", "failing"}


@pytest.fixture(scope="module")
def relays(redis_url: str) -> Iterator[tuple[str, str]]:
    """Relays A and B on one Redis; a daemon serving ``AGENTS`` is connected to B."""
    store = ("--relay", "--store", redis_url)
    with uamp_serve(*store) as a, uamp_serve(*store) as b:
        daemon = spawn_daemon(b, *sorted(AGENTS))
        try:
            wait_online(b, AGENTS)
            wait_online(a, AGENTS)
            yield a, b
        finally:
            stop(daemon)


def ws(base: str) -> str:
    return base.replace("http://", "ws://") + "/ws"


async def respond(base: str, agent: str, text: str, *, cancel_after: int = 0) -> list[ev.Event]:
    """Every event of one response of ``agent`` through ``base`` (cancelled after N deltas)."""
    with trio.fail_after(TIMEOUT):
        async with connect(ws(base)) as client:
            session = await client.create_session(agent=agent)
            seen: list[ev.Event] = []
            async for event in session.respond(text):
                seen.append(event)
                deltas = sum(1 for e in seen if e.type == "response.delta")
                if cancel_after and event.type == "response.delta" and deltas == cancel_after:
                    await session.cancel()
                if event.type in ("response.done", "response.error", "response.cancelled"):
                    break
            return seen


def texts(events: list[ev.Event]) -> list[str]:
    return [
        e.delta.text
        for e in events
        if isinstance(e, ev.ResponseDelta) and isinstance(getattr(e.delta, "text", None), str)
    ]


def test_every_relay_process_lists_the_daemons_agents(relays: tuple[str, str]) -> None:
    a, b = relays
    for base in (a, b):
        listed = httpx.get(f"{base}/agents").json()["agents"]
        assert {(x["name"], x["kind"], x["state"]) for x in listed} == {
            (name, "connected", "online") for name in AGENTS
        }
    caps = httpx.get(f"{a}/agents/alpha/capabilities").json()
    assert caps["id"] == "alpha" and caps["provider"] == "uamp-demo"  # what the daemon declared


def test_a_client_of_a_gets_answers_from_the_daemon_on_b(relays: tuple[str, str]) -> None:
    a, _ = relays
    client = openai.OpenAI(base_url=f"{a}/agents/alpha", api_key="x", max_retries=0)
    reply = client.chat.completions.create(
        model="alpha", messages=[{"role": "user", "content": "hello from A"}]
    )
    assert reply.choices[0].message.content == "You said: hello from A"
    streamed = client.chat.completions.create(
        model="alpha", messages=[{"role": "user", "content": "streamed"}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == (
        "You said: streamed"
    )


def test_deltas_arrive_in_order_and_a_cancel_reaches_the_daemon(relays: tuple[str, str]) -> None:
    a, _ = relays
    seen = trio.run(lambda: respond(a, "slow", "go", cancel_after=5))
    assert seen[-1].type == "response.cancelled"
    ticks = texts(seen)
    assert ticks == [f"tick {n} " for n in range(len(ticks))]  # in order, none lost
    assert 5 <= len(ticks) < 400  # stopped on the daemon, not at the 400th tick
    again = trio.run(lambda: respond(a, "alpha", "still there?"))
    assert "".join(texts(again)) == "You said: still there?"


def test_the_daemons_error_reaches_the_client_with_its_code(relays: tuple[str, str]) -> None:
    a, _ = relays
    seen = trio.run(lambda: respond(a, "failing", "go"))
    assert texts(seen) == ["trying "]
    error = seen[-1]
    assert isinstance(error, ev.ResponseErrorEvent)
    assert (error.error.code, error.error.message) == ("tool_failed", "the weather service is down")


def test_a_top_up_on_b_is_paid_by_the_client_of_a(relays: tuple[str, str]) -> None:
    a, _ = relays

    async def main() -> list[ev.Event]:
        with trio.fail_after(TIMEOUT):
            async with connect(ws(a)) as client:
                session = await client.create_session(agent="topup")
                seen: list[ev.Event] = []
                async for event in session.respond("go"):
                    seen.append(event)
                    if event.type == "payment.required":
                        await session.pay("tok_from_a")
                    if event.type in ("response.done", "response.error"):
                        break
                return seen

    seen = trio.run(main)
    types = [e.type for e in seen]
    assert types[-1] == "response.done", types
    assert types.index("payment.required") < types.index("payment.accepted")
    text = "".join(texts(seen))  # B's daemon got B's receipt, not A's client's token
    assert text.startswith("first half; second half, paid with rcpt_")
    assert "tok_from_a" not in text


async def kill_mid_stream(base: str, victim: subprocess.Popen[str]) -> list[ev.Event]:
    """A response of ``slow`` through ``base``; ``victim`` gets SIGKILL after three deltas."""
    seen: list[ev.Event] = []
    with trio.fail_after(TIMEOUT):
        async with connect(ws(base)) as client:
            session = await client.create_session(agent="slow")
            async for event in session.respond("go"):
                seen.append(event)
                if len(texts(seen)) == 3:
                    victim.send_signal(signal.SIGKILL)
                if event.type in ("response.done", "response.error"):
                    break
    return seen


def test_a_daemon_that_goes_is_agent_offline_on_every_process(redis_url: str) -> None:
    # A database of its own: the module's relays and daemon serve 'slow' too.
    own_db = redis_url.rpartition("/")[0] + "/1"
    store = ("--relay", "--store", own_db, "--log-level", "warning")
    with uamp_serve(*store) as a, uamp_serve(*store) as b:
        daemon = spawn_daemon(b, "slow")
        wait_online(a, {"slow"})

        try:
            seen = trio.run(kill_mid_stream, a, daemon)
        finally:
            stop(daemon)
        for base in (a, b):
            wait_online(base, {"slow"}, online=False)
        refused = httpx.post(
            f"{a}/agents/slow/chat/completions",
            json={"model": "slow", "messages": [{"role": "user", "content": "hi"}]},
        )
    error = seen[-1]
    assert isinstance(error, ev.ResponseErrorEvent), [e.type for e in seen]
    assert error.error.code == "agent_offline"
    assert 3 <= len(texts(seen)) < 400
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "agent_offline"


def test_a_relay_process_that_dies_interrupts_its_turns_and_is_agent_offline_on_the_others(
    redis_url: str,
) -> None:
    own_db = redis_url.rpartition("/")[0] + "/2"
    store = ("--relay", "--store", own_db, "--log-level", "warning")
    with uamp_serve(*store) as a:
        b = spawn_serve(*store)
        daemon = None
        try:
            b_url = wait_for_line(b, r"serving on (https?://[\d.]+:\d+)").group(1)
            daemon = spawn_daemon(b_url, "slow")
            wait_online(a, {"slow"})
            seen = trio.run(kill_mid_stream, a, b)  # the owner, not the daemon
            wait_online(a, {"slow"}, online=False)
        finally:
            b.kill()
            b.wait()
            if daemon is not None:
                stop(daemon)
    error = seen[-1]
    assert isinstance(error, ev.ResponseErrorEvent), [e.type for e in seen]
    assert error.error.code == "interrupted"  # the turn is lost; the agent may come back
    assert 3 <= len(texts(seen)) < 400


def test_a_daemon_behind_a_load_balancer_moves_to_a_live_relay_when_its_own_dies(
    redis_url: str,
) -> None:
    """Three relays behind haproxy; the one holding the daemon is killed -9 mid-turn.

    The client (on another relay) gets ``interrupted``; the daemon reconnects
    through haproxy to a live relay, and the next turn is answered there.
    """
    own_db = redis_url.rpartition("/")[0] + "/3"
    # haproxy's health checks: no access log filling a pipe nobody reads.
    store = ("--relay", "--store", own_db, "--log-level", "warning", "--no-access-log")
    procs = [spawn_serve(*store) for _ in range(3)]
    daemon = None
    try:
        urls = [wait_for_line(p, r"serving on (https?://[\d.]+:\d+)").group(1) for p in procs]
        with running_haproxy([u.removeprefix("http://") for u in urls]) as balancer:
            daemon = spawn_daemon(balancer, "slow")
            for url in urls:
                wait_online(url, {"slow"})
            routes = redis.Redis.from_url(own_db)
            try:
                owner_node = orjson.loads(routes.hget("uamp:relay:agents", "slow"))["node"]
            finally:
                routes.close()
            owner = next(p for p in procs if owner_node.startswith(f"{p.pid}-"))
            client = urls[(procs.index(owner) + 1) % 3]
            seen = trio.run(kill_mid_stream, client, owner)
            try:
                wait_online(client, {"slow"})  # back, through a live relay
            except AssertionError as exc:
                raise AssertionError(f"{exc}\ndaemon said:\n{stop(daemon)[-3000:]}") from None
            after = trio.run(respond_briefly, client)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        if daemon is not None:
            stop(daemon)
    error = seen[-1]
    assert isinstance(error, ev.ResponseErrorEvent), [e.type for e in seen]
    assert error.error.code == "interrupted"
    assert 3 <= len(texts(seen)) < 400
    assert after[-1].type == "response.cancelled"  # a whole new turn, answered
    assert texts(after)[:3] == ["tick 0 ", "tick 1 ", "tick 2 "]


async def respond_briefly(base: str) -> list[ev.Event]:
    """Three deltas of ``slow`` through ``base``, then a cancel."""
    return await respond(base, "slow", "again", cancel_after=3)
