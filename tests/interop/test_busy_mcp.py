"""The busy policy on MCP named sessions, with the ``mcp`` Python SDK as the client.

A ``tools/call`` naming a ``session`` whose earlier call still runs (two
calls on one Streamable HTTP session of the SDK's ``Client``): ``reject`` is
a tool error (``_meta.code`` ``conversation_busy``), ``enqueue`` answers it
after the running call, on the conversation that call left, ``interrupt``
stops the running call (its answer: a tool error with
``_meta["uamp.on_busy"] == "interrupt"``) and keeps what it said in the
conversation, ``rollback`` stops it and leaves none of its turn. The policy
is the server's (``on_busy``) or the call's (``_meta["uamp.on_busy"]``).
Before the policy a call on a busy session was always refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests._support.busy import Holder, until_async
from uamp_trio.app import create_app

TIMEOUT = 30

#: policy -> (the second call's answer, the first call's answer, what "two" saw)
CASES: dict[str, tuple[str | None, str | None, list[str]]] = {
    "reject": (None, "echo hold one", []),
    "enqueue": ("echo two", "echo hold one", ["user:hold one", "assistant:echo hold one"]),
    "interrupt": ("echo two", None, ["user:hold one", "assistant:echo hold one"]),
    "rollback": ("echo two", None, []),
}


def _run(main: Callable[[], Any]) -> Any:
    async def bounded() -> Any:
        with anyio.fail_after(TIMEOUT):
            return await main()

    return anyio.run(bounded)


@pytest.mark.parametrize("how", ["server", "meta"])
@pytest.mark.parametrize("policy", list(CASES))
def test_a_second_call_in_a_busy_session(
    thread_server: Callable[..., Any], policy: str, how: str
) -> None:
    second_says, first_says, history = CASES[policy]
    default = policy if how == "server" else ("reject" if policy == "enqueue" else "enqueue")
    agent = Holder()
    server = thread_server(create_app([agent]), on_busy=default)
    meta = {"uamp.on_busy": policy} if how == "meta" else None
    results: dict[str, Any] = {}

    async def call(client: Client, name: str, prompt: str, session: str) -> None:
        results[name] = await client.call_tool("holder", {"prompt": prompt, "session": session})

    async def main() -> None:
        async with (
            Client(f"http://127.0.0.1:{server.port}/agents/holder/mcp") as client,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(call, client, "first", "hold one", "s1")
            await until_async(lambda: agent.started == ["hold one"])
            if policy == "enqueue":
                tg.start_soon(lambda: _second(client, meta, results))
                # Another session is never held: it is answered while "two" waits.
                await call(client, "other", "elsewhere", "s2")
                assert agent.started == ["hold one", "elsewhere"]
            else:
                await _second(client, meta, results)
            agent.release.set()

    _run(main)
    first, second = results["first"], results["second"]
    if second_says is None:
        assert second.is_error and second.meta == {"code": "conversation_busy"}
        assert "two" not in agent.started
    else:
        assert not second.is_error and second.content[0].text == second_says
        assert agent.seen["two"] == [*history, "user:two"]
    if first_says is None:  # stopped by the second call
        assert first.is_error and first.meta == {"uamp.on_busy": policy}
        assert "echo hold one" in first.content[0].text
        assert agent.cancelled == ["hold one"]
    else:
        assert not first.is_error and first.content[0].text == first_says
        assert agent.cancelled == []


async def _second(client: Client, meta: dict[str, Any] | None, into: dict[str, Any]) -> None:
    into["second"] = await client.call_tool("holder", {"prompt": "two", "session": "s1"}, meta=meta)


def test_a_bad_policy_is_invalid_params(thread_server: Callable[..., Any]) -> None:
    agent = Holder()
    server = thread_server(create_app([agent]))

    async def main() -> None:
        async with Client(f"http://127.0.0.1:{server.port}/agents/holder/mcp") as client:
            with pytest.raises(MCPError) as caught:
                await client.call_tool(
                    "holder", {"prompt": "x", "session": "s"}, meta={"uamp.on_busy": "later"}
                )
            assert caught.value.code == -32602

    _run(main)
    assert agent.started == []
