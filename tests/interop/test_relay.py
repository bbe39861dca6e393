"""``uamp connect`` behind ``uamp serve --relay``: real subprocesses, real clients, every transport.

The daemon hosts ``alpha``, ``beta`` (demo agents) and ``slow`` (a long
stream) and dials the relay; every client people use then reaches each agent
through the relay exactly as if it were hosted there. Then the daemon is
killed with SIGKILL in the middle of a stream, and restarted.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import trio

from tests._support.cli import ENV, ROOT, uamp, uamp_serve
from tests.interop.test_cross_transport import TRANSPORTS as EVERY_TRANSPORT
from tests.interop.test_cross_transport import acp_stdio, completions_plain, mcp_stdio
from uamp_proto import codec
from uamp_proto import events as ev
from uamp_proto.jose import JWKS
from uamp_proto.manifest import verify_manifest
from uamp_trio.client import connect

AGENTS = "tests._support.relay_agents"
TIMEOUT = 30


def spawn_daemon(base: str, *names: str) -> subprocess.Popen[str]:
    """``uamp connect BASE --agent ...`` in a subprocess (its log on a pipe)."""
    agents = [arg for name in names for arg in ("--agent", f"{AGENTS}:{name}")]
    return subprocess.Popen(
        [sys.executable, "-m", "uamp_trio", "connect", base, *agents],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=ENV,
    )


def wait_online(base: str, names: set[str], *, online: bool = True) -> list[dict[str, str]]:
    """``GET /agents`` until every agent of ``names`` has the wanted state."""
    want = "online" if online else "offline"
    deadline = time.monotonic() + TIMEOUT
    while True:
        listed = httpx.get(f"{base}/agents").json()["agents"]
        states = {a["name"]: a["state"] for a in listed}
        if all(states.get(name) == want for name in names):
            return listed  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, f"agents never got {want}: {listed}"
        time.sleep(0.1)


def stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.stdout.read() if proc.stdout else ""


@pytest.fixture(scope="module")
def relay() -> Iterator[str]:
    """``uamp serve --relay`` with ``uamp connect`` serving alpha, beta and slow."""
    with uamp_serve("--relay") as url:
        daemon = spawn_daemon(url, "alpha", "beta", "slow", "topup")
        try:
            wait_online(url, {"alpha", "beta", "slow", "topup"})
            yield url
        finally:
            stop(daemon)


#: Every transport of the cross-transport test but the stdio carriers, ACP's
#: and MCP's (each starts an agent process of its own, not a client of the
#: relay): ACP reaches the relay over HTTP instead, MCP over Streamable HTTP.
TRANSPORTS = [ask for ask in EVERY_TRANSPORT if ask not in (acp_stdio, mcp_stdio)]


def acp_http(base: str, prompt: str, agent: str) -> str:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "prompt/submit",
        "params": {"messages": [{"role": "user", "content": prompt}]},
    }
    reply = httpx.post(f"{base}/agents/{agent}/acp", json=body, timeout=TIMEOUT)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["result"]["content"])


@pytest.mark.parametrize("agent", ["alpha", "beta"])
@pytest.mark.parametrize("ask", [*TRANSPORTS, acp_http], ids=lambda f: f.__name__)
def test_every_transport_reaches_each_daemon_agent(relay: str, ask: Any, agent: str) -> None:
    assert (
        ask(relay, f"hello {agent} via relay", agent=agent) == f"You said: hello {agent} via relay"
    )


def test_the_listing_and_the_daemon_declared_capabilities(relay: str) -> None:
    listed = wait_online(relay, {"alpha", "beta", "slow", "topup"})
    assert {(a["name"], a["kind"]) for a in listed} == {
        ("alpha", "connected"),
        ("beta", "connected"),
        ("slow", "connected"),
        ("topup", "connected"),
    }
    caps = httpx.get(f"{relay}/agents/beta/capabilities").json()
    assert caps["id"] == "beta" and caps["provider"] == "uamp-demo"
    card = httpx.get(f"{relay}/agents/beta/.well-known/agent-card.json").json()
    assert card["name"] == "beta"


def test_the_hub_lists_the_daemons_agents_with_their_trust_anchors(relay: str) -> None:
    hub = httpx.get(f"{relay}/.well-known/agent-hub.json").json()
    entries = {e["name"]: e for e in hub["agents"]}
    assert {"alpha", "beta", "slow", "topup"} <= set(entries)
    for name in ("alpha", "beta", "slow", "topup"):
        entry = entries[name]
        assert (entry["kind"], entry["state"]) == ("connected", "online")
        anchors = JWKS.parse(entry["trust_anchors"])
        manifest = verify_manifest(entry["manifest_jws"], anchors)  # raises unless it verifies
        assert manifest["agent"].startswith("uamp/1.")


def test_a_client_tool_round_goes_through_the_relay(relay: str) -> None:
    client = openai.OpenAI(base_url=f"{relay}/agents/alpha", api_key="x", max_retries=0)
    tools: Any = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    asked: Any = [{"role": "user", "content": "get_weather Paris"}]
    first = client.chat.completions.create(model="alpha", messages=asked, tools=tools)
    assert first.choices[0].finish_reason == "tool_calls"
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "get_weather Paris"}  # type: ignore[union-attr]
    follow: Any = [
        *asked,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    second = client.chat.completions.create(model="alpha", messages=follow, tools=tools)
    assert second.choices[0].message.content == "Tool get_weather returned: sunny"


def test_a_cancel_mid_stream_reaches_the_daemon(relay: str) -> None:
    async def main() -> list[str]:
        with trio.fail_after(TIMEOUT):
            async with connect(relay.replace("http://", "ws://") + "/ws") as client:
                session = await client.create_session(agent="slow")
                seen: list[str] = []
                stream = session.respond("go")
                async for event in stream:
                    seen.append(event.type)
                    if seen.count("response.delta") == 3:
                        await session.cancel()
                    if event.type in ("response.cancelled", "response.done", "response.error"):
                        break
                # The session keeps working: the next response starts afresh.
                again = session.respond("go")
                async for event in again:
                    if event.type == "response.delta":
                        await session.cancel()
                    if event.type == "response.cancelled":
                        seen.append("again")
                        break
                return seen

    seen = trio.run(main)
    assert seen[-2:] == ["response.cancelled", "again"]
    assert seen.count("response.delta") < 10  # stopped early, not at the 400th tick


def test_the_daemons_mid_stream_top_up_reaches_the_client_and_its_payment_the_daemon(
    relay: str,
) -> None:
    async def main() -> list[ev.Event]:
        with trio.fail_after(TIMEOUT):
            async with connect(relay.replace("http://", "ws://") + "/ws") as client:
                session = await client.create_session(agent="topup")
                seen: list[ev.Event] = []
                stream = session.respond("go")
                async for event in stream:
                    seen.append(event)
                    if event.type == "payment.required":
                        with trio.move_on_after(0.3):  # paused: nothing more comes unpaid
                            seen.append(await stream.__anext__())
                        await session.pay("tok_topped_up")
                    if event.type in ("response.done", "response.error", "response.cancelled"):
                        break
                return seen

    seen = trio.run(main)
    types = [event.type for event in seen]
    assert types[-1] == "response.done", types
    asked, paid = types.index("payment.required"), types.index("payment.accepted")
    assert asked < paid
    assert "response.delta" not in types[asked:paid]
    required = seen[asked]
    assert isinstance(required, ev.PaymentRequired)
    assert required.requirements.amount == "0.50" and required.is_topup
    text = "".join(
        e.delta.text for e in seen if isinstance(e, ev.ResponseDelta) and hasattr(e.delta, "text")
    )
    # The second half ran on the daemon after its payment.submit: a receipt of the
    # relay's, never the token the client paid with (docs/relay.md, "Money").
    assert text.startswith("first half; second half, paid with rcpt_")
    assert "tok_topped_up" not in text
    assert types.count("response.created") == 1


def test_a_killed_daemon_is_a_clean_error_then_back_after_a_restart() -> None:
    with uamp_serve("--relay") as base:
        daemon = spawn_daemon(base, "alpha", "slow")
        try:
            wait_online(base, {"alpha", "slow"})
            body = {
                "model": "slow",
                "stream": True,
                "messages": [{"role": "user", "content": "go"}],
            }
            chunks: list[dict[str, Any]] = []
            with httpx.stream(
                "POST", f"{base}/agents/slow/chat/completions", json=body, timeout=TIMEOUT
            ) as resp:
                assert resp.status_code == 200
                for line in resp.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunks.append(json.loads(line[6:]))
                    if len(chunks) == 3:
                        daemon.send_signal(signal.SIGKILL)
            daemon.wait(10)
            errors = [c["error"] for c in chunks if "error" in c]
            assert errors and errors[-1]["code"] == "agent_offline", chunks[-2:]
            wait_online(base, {"alpha", "slow"}, online=False)
            offline = httpx.post(
                f"{base}/agents/alpha/chat/completions",
                json={"messages": [{"role": "user", "content": "hi"}]},
            )
            assert offline.status_code == 503
            assert offline.json()["error"]["code"] == "agent_offline"
            daemon = spawn_daemon(base, "alpha", "slow")
            wait_online(base, {"alpha", "slow"})
            assert completions_plain(base, "back again", agent="alpha") == "You said: back again"
        finally:
            log = stop(daemon)
    assert "registered agent 'alpha'" in log


def test_a_payment_round_through_the_relay(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    issued = uamp("tokens", "issue", "--ledger", str(ledger), "--amount", "1.00")
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.strip()
    with uamp_serve("--relay", "--ledger", str(ledger)) as base:
        daemon = spawn_daemon(base, "alpha")
        try:
            wait_online(base, {"alpha"})
            body = {"model": "alpha", "messages": [{"role": "user", "content": "pay me"}]}
            url = f"{base}/agents/alpha/chat/completions"
            refused = httpx.post(url, json=body)
            assert refused.status_code == 402
            assert refused.json()["error"]["code"] == "payment_required"
            paid = httpx.post(url, json=body, headers={"X-PAYMENT": token})
            assert paid.status_code == 200
            assert paid.json()["choices"][0]["message"]["content"] == "You said: pay me"
        finally:
            stop(daemon)
    shown = json.loads(uamp("tokens", "show", "--ledger", str(ledger), token).stdout)
    assert shown["locked"] == "0.00"
    assert float(shown["settled"]) == pytest.approx(0.01)


def test_connect_refuses_a_bad_command_line_in_one_line() -> None:
    done = uamp("connect", "ftp://nowhere", "--agent", f"{AGENTS}:alpha")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "not a ws://" in done.stderr


def test_connect_says_in_one_line_that_an_agent_cannot_be_loaded() -> None:
    done = uamp("connect", "http://127.0.0.1:9", "--agent", "no_such_module:agent")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "cannot import 'no_such_module'" in done.stderr


def test_connect_says_in_one_line_that_the_relay_refused_it(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("agent:alpha:key-alpha\nalice:key-alice\n")
    with uamp_serve("--relay", "--auth-api-keys", str(keys)) as base:
        wrong = uamp("connect", base, "--agent", f"{AGENTS}:alpha", "--token", "nope", timeout=30)
        user = uamp("connect", base, "--agent", f"{AGENTS}:alpha", "--token", "key-alice")
    assert wrong.returncode == 1
    assert wrong.stderr.strip().splitlines()[-1].startswith("uamp connect: the relay at ")
    assert "refused the credential" in wrong.stderr and "nope" not in wrong.stderr
    assert user.returncode == 1
    assert "refused every agent: alpha (forbidden)" in user.stderr.strip().splitlines()[-1]
    assert "key-alice" not in user.stderr + user.stdout


def test_a_uap_agents_own_tool_round_streams_through_the_relay() -> None:
    async def main() -> list[dict[str, Any]]:
        async with connect(base.replace("http://", "ws://") + "/ws") as client:
            session = await client.create_session(agent="uap")
            return [
                codec.to_dict(event)
                async for event in session.respond("what is 2+3?")
                if event.type == "response.delta"
            ]

    with uamp_serve("--relay") as base:
        daemon = spawn_daemon(base, "uap_demo")
        try:
            wait_online(base, {"uap"})
            deltas = trio.run(main)
        finally:
            stop(daemon)
    kinds = [d["delta"]["type"] for d in deltas]
    assert "tool_call" in kinds and "tool_result" in kinds
    result = next(d["delta"]["tool_result"] for d in deltas if d["delta"]["type"] == "tool_result")
    assert result["result"] == "5"
    assert "".join(d["delta"].get("text", "") for d in deltas) == "2 + 3 = 5"


def test_sigterm_stops_the_daemon_cleanly_and_its_agents_go_offline() -> None:
    with uamp_serve("--relay") as base:
        daemon = spawn_daemon(base, "alpha")
        wait_online(base, {"alpha"})
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(10) == 0
        log = daemon.stdout.read() if daemon.stdout else ""
        listed = httpx.get(f"{base}/agents").json()["agents"]
    assert "SIGTERM, stopping" in log
    assert listed == [{"name": "alpha", "kind": "connected", "state": "offline"}]
