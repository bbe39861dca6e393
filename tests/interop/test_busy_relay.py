"""The busy policy on turns relayed to a daemon: ``uamp serve --relay`` and ``uamp connect``.

The agent runs in the daemon (``tests._support.relay_agents:holding``); the
client talks to the relay over a raw UAMP WebSocket (the UAMP client
library runs one response per session at a time). The relay keeps the
conversation and applies the policy with the one host gate, as for an agent
of its own; the daemon keeps no state and hears each turn under a session
id of its own, so a stopped turn is a ``response.cancel`` there. A
``response.create`` while the held turn runs: ``reject`` is ``session.error``
``response_in_progress``, ``enqueue`` runs after it on the conversation it
left, ``interrupt`` ends it ``response.cancelled`` (its partial output stays
in the conversation), ``rollback`` ends it and drops its turn. The policy is
the relay's (``--on-busy``) or the event's (``uamp.on_busy``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.cli import uamp_serve
from tests._support.wire import create_session, recv, send, until
from tests.interop.test_relay import spawn_daemon, stop, wait_online

TIMEOUT = 30

#: policy -> (the second message's events, what it saw of the held turn)
CASES: dict[str, tuple[list[str], bool]] = {
    "reject": (["session.error"], False),
    "enqueue": (["response.done", "response.created", "response.delta", "response.done"], True),
    "interrupt": (
        ["response.cancelled", "response.created", "response.delta", "response.done"],
        True,
    ),
    "rollback": (
        ["response.cancelled", "response.created", "response.delta", "response.done"],
        False,
    ),
}


@contextmanager
def _relay(*args: str) -> Iterator[str]:
    """A relay with ``uamp connect`` serving ``holding``."""
    with uamp_serve("--relay", *args) as url:
        daemon = spawn_daemon(url, "holding")
        try:
            wait_online(url, {"holding"})
            yield url
        finally:
            stop(daemon)


@pytest.fixture(scope="module")
def relay() -> Iterator[str]:
    """A relay with the default policy (enqueue)."""
    with _relay() as url:
        yield url


async def _double_text(base: str, policy: str, release: Path, **create: Any) -> list[Any]:
    """Hold a turn, send a second message, release; every event after the first delta."""
    url = base.replace("http", "ws", 1) + "/agents/holding/uamp"
    held = f"hold {release}"
    seen: list[Any] = []
    with trio.fail_after(TIMEOUT):
        async with open_ws(url) as ws:
            await create_session(ws)
            await send(ws, type="input.text", text=held)
            await send(ws, type="response.create")
            started = await until(ws, "response.delta")
            assert started[-1]["delta"]["text"] == f"echo {held}"
            await send(ws, type="input.text", text="two")
            await send(ws, type="response.create", **create)
            if policy in ("reject", "enqueue"):
                if policy == "reject":
                    seen.append(await recv(ws))
                release.touch()  # the held turn may end now
            else:
                seen += await until(ws, "response.cancelled")
            seen += await until(ws, "response.done")
            if policy == "enqueue":
                seen += await until(ws, "response.done")
    return [e for e in seen if e["type"] != "response.delta" or "two" in e["delta"]["text"]]


def _check(policy: str, events: list[Any], release: Path) -> None:
    kinds, kept = CASES[policy]
    held = f"hold {release}"
    got = [e["type"] for e in events]
    if policy == "reject":
        assert got[0] == "session.error" and got[-1] == "response.done"
        assert events[0]["error"]["code"] == "response_in_progress"
        return
    assert got == kinds
    if policy in ("interrupt", "rollback"):
        assert events[0]["partial_output"] == [{"type": "text", "text": f"echo {held}"}]
    [answer] = [e["delta"]["text"] for e in events if e["type"] == "response.delta"]
    before = f"user:{held}/assistant:echo {held}" if kept else ""
    assert answer == f"echo two [{before}]"


@pytest.mark.parametrize("policy", list(CASES))
def test_the_events_policy_holds_for_a_relayed_turn(
    relay: str, policy: str, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    events = trio.run(partial(_double_text, relay, policy, release, **{"uamp.on_busy": policy}))
    _check(policy, events, release)


@pytest.mark.parametrize("policy", list(CASES))
def test_the_relays_on_busy_holds_for_a_relayed_turn(policy: str, tmp_path: Path) -> None:
    release = tmp_path / "release"
    with _relay("--on-busy", policy) as url:
        events = trio.run(_double_text, url, policy, release)
    _check(policy, events, release)
