"""The busy policy on ACP, with agent-client-protocol's own client over the WebSocket carrier.

A second ``session/prompt`` while one runs in the same session: ``enqueue``
(the server's default) answers it after the first, ``reject`` is JSON-RPC
``-32600`` with ``data.code`` ``conversation_busy`` (what ACP answered every
time before the policy), ``interrupt`` ends the first with ``stopReason:
"cancelled"`` and keeps its partial answer in the session, ``rollback`` drops
it. The policy is the server's (``on_busy``) or the prompt's ``_meta``
``uamp.on_busy``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import acp
import pytest
from acp.ws import create_websocket_stream

from tests._support.agents import run_asyncio
from tests._support.busy import Holder, until_async
from tests.interop.test_acp_bounds import _Quiet
from uamp_trio.app import create_app

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _serve(thread_server: Any, **config: Any) -> tuple[Any, Holder]:
    agent = Holder()
    return thread_server(create_app([agent]), **config), agent


async def _session(server: Any) -> tuple[Any, str]:
    url = server.url.replace("http", "ws") + "/agents/holder/acp/stream"
    conn = acp.connect_to_agent(_Quiet(), await create_websocket_stream(url))
    await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
    sid = (await conn.new_session(cwd="/", mcp_servers=[])).session_id
    return conn, sid


def _say(text: str) -> list[Any]:
    return [acp.text_block(text)]


@pytest.mark.parametrize("how", ["server", "meta"])
def test_enqueue_runs_the_second_prompt_after_the_first(thread_server: Any, how: str) -> None:
    server, agent = _serve(thread_server, on_busy="reject" if how == "meta" else "enqueue")
    meta = {"uamp.on_busy": "enqueue"} if how == "meta" else {}

    async def main() -> None:
        conn, sid = await _session(server)
        try:
            first = asyncio.create_task(conn.prompt(sid, _say("hold one")))
            await until_async(lambda: agent.started == ["hold one"])
            second = asyncio.create_task(conn.prompt(sid, _say("two"), **meta))
            await asyncio.sleep(0.3)
            assert agent.started == ["hold one"] and not second.done()  # it waits
            agent.release.set()
            assert (await first).stop_reason == "end_turn"
            assert (await second).stop_reason == "end_turn"
        finally:
            await conn.close()
        assert agent.started == ["hold one", "two"]
        assert agent.seen["two"] == ["user:hold one", "assistant:echo hold one", "user:two"]

    run_asyncio(main, 30)


@pytest.mark.parametrize("how", ["server", "meta"])
def test_reject_refuses_the_second_prompt(thread_server: Any, how: str) -> None:
    server, agent = _serve(thread_server, on_busy="reject" if how == "server" else "enqueue")
    meta = {"uamp.on_busy": "reject"} if how == "meta" else {}

    async def main() -> None:
        conn, sid = await _session(server)
        try:
            first = asyncio.create_task(conn.prompt(sid, _say("hold one")))
            await until_async(lambda: agent.started == ["hold one"])
            with pytest.raises(acp.RequestError) as refused:
                await conn.prompt(sid, _say("two"), **meta)
            assert refused.value.code == -32600
            assert refused.value.data == {"sessionId": sid, "code": "conversation_busy"}
            agent.release.set()
            assert (await first).stop_reason == "end_turn"
            # Idle again: the next prompt runs.
            assert (await conn.prompt(sid, _say("three"), **meta)).stop_reason == "end_turn"
        finally:
            await conn.close()
        assert agent.started == ["hold one", "three"]

    run_asyncio(main, 30)


@pytest.mark.parametrize(("policy", "kept"), [("interrupt", True), ("rollback", False)])
def test_interrupt_keeps_and_rollback_drops_the_stopped_turn(
    thread_server: Any, policy: str, kept: bool
) -> None:
    server, agent = _serve(thread_server, on_busy=policy)

    async def main() -> None:
        conn, sid = await _session(server)
        try:
            first = asyncio.create_task(conn.prompt(sid, _say("hold one")))
            await until_async(lambda: agent.started == ["hold one"])
            second = await conn.prompt(sid, _say("two"))
            assert second.stop_reason == "end_turn"
            assert (await first).stop_reason == "cancelled"
            third = await conn.prompt(sid, _say("three"))
            assert third.stop_reason == "end_turn"
        finally:
            await conn.close()
        assert agent.cancelled == ["hold one"]
        stopped = ["user:hold one", "assistant:echo hold one"] if kept else []
        assert agent.seen["two"] == [*stopped, "user:two"]
        assert agent.seen["three"] == [*stopped, "user:two", "assistant:echo two", "user:three"]

    run_asyncio(main, 30)


def test_the_queue_of_a_session_is_bounded(thread_server: Any) -> None:
    server, agent = _serve(thread_server, busy_max_queued=2)

    async def main() -> None:
        conn, sid = await _session(server)
        try:
            first = asyncio.create_task(conn.prompt(sid, _say("hold one")))
            await until_async(lambda: agent.started == ["hold one"])
            waiting = [asyncio.create_task(conn.prompt(sid, _say(f"w{i}"))) for i in range(2)]
            await asyncio.sleep(0.3)
            for _ in range(3):  # refused every time while the queue is full
                with pytest.raises(acp.RequestError) as refused:
                    await conn.prompt(sid, _say("more"))
                assert refused.value.data["code"] == "queue_full"
            agent.release.set()
            await first
            assert [(await w).stop_reason for w in waiting] == ["end_turn", "end_turn"]
        finally:
            await conn.close()
        assert agent.started == ["hold one", "w0", "w1"]

    run_asyncio(main, 30)


def test_a_bad_policy_is_invalid_params(thread_server: Any) -> None:
    server, _ = _serve(thread_server)

    async def main() -> None:
        conn, sid = await _session(server)
        try:
            with pytest.raises(acp.RequestError) as refused:
                await conn.prompt(sid, _say("x"), **{"uamp.on_busy": "later"})
            assert refused.value.code == -32602
            assert refused.value.data == {"code": "invalid_policy"}
        finally:
            await conn.close()

    run_asyncio(main, 30)


def test_the_waiting_prompts_of_one_principal_are_bounded_over_sessions(
    thread_server: Any,
) -> None:
    server, agent = _serve(thread_server, busy_max_queued_per_principal=2)

    async def main() -> None:
        conn, first = await _session(server)
        try:
            sids = [
                first,
                *[(await conn.new_session(cwd="/", mcp_servers=[])).session_id for _ in "ab"],
            ]
            running = [asyncio.create_task(conn.prompt(s, _say(f"hold {s}"))) for s in sids]
            await until_async(lambda: len(agent.started) == 3)
            waiting = [asyncio.create_task(conn.prompt(s, _say("next"))) for s in sids[:2]]
            await asyncio.sleep(0.3)
            with pytest.raises(acp.RequestError) as refused:  # a third session, same caller
                await conn.prompt(sids[2], _say("next"))
            assert refused.value.data["code"] == "queue_full"
            agent.release.set()
            answers = [await t for t in [*running, *waiting]]
            assert [a.stop_reason for a in answers] == ["end_turn"] * 5
        finally:
            await conn.close()

    run_asyncio(main, 30)
