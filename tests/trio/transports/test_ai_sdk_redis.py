"""AI SDK answers across two servers sharing one real Redis: resume and supersession.

Each server has its own :class:`RedisEventLog` (its own node id) on the same
``redis-server``, as two ``uamp serve`` processes would.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
import trio

from tests._support import wire
from tests._support.agents import Words
from tests._support.cli import spawn_serve, uamp_serve, wait_for_line
from uamp_stores.event_log_redis import RedisEventLog
from uamp_trio import App
from uamp_trio.stores import Stores
from uamp_trio.transports import ai_sdk

TIMEOUT = 30
WORDS = [f"w{n} " for n in range(30)]


@asynccontextmanager
async def two_servers(redis_url: str) -> AsyncIterator[tuple[list[str], list[Words]]]:
    """Two servers on one Redis, each with its own slow agent."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    agents = [Words("slow", *WORDS, pause=0.05) for _ in range(2)]
    async with AsyncExitStack() as stack:
        urls = []
        for agent in agents:
            log = RedisEventLog(redis_url, prefix=prefix)
            app = App([agent], stores=Stores(event_log=log))
            app.mount(ai_sdk.mount)
            server = await stack.enter_async_context(wire.serving(app))
            urls.append(f"http://127.0.0.1:{server.port}/agents/slow/ai-sdk")
            stack.push_async_callback(log.aclose)
        yield urls, agents


def body(chat_id: str) -> dict[str, Any]:
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "talk"}]}
    return {"id": chat_id, "messages": [user]}


def chunks(raw: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(block[6:]) for block in raw.split(b"\n\n") if block.startswith(b"data: {")]


def text(got: list[dict[str, Any]]) -> str:
    return "".join(c["delta"] for c in got if c["type"] == "text-delta")


async def first_chunks(http: httpx.AsyncClient, url: str, chat_id: str) -> list[dict[str, Any]]:
    """POST, read until the answer has said something, then leave (an aborted fetch)."""
    seen = b""
    async with http.stream("POST", url, json=body(chat_id)) as r:
        async for part in r.aiter_bytes():
            seen += part
            if b"text-delta" in seen:
                break
    return chunks(seen)


async def test_a_resume_on_the_other_server_replays_from_the_start(redis_url: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with two_servers(redis_url) as ((first, second), _), httpx.AsyncClient() as http:
            seen = await first_chunks(http, first, "chat-r")
            resumed = await http.get(f"{second}/chat-r/stream")
            over = [await http.get(f"{url}/chat-r/stream") for url in (first, second)]
    assert resumed.status_code == 200
    assert resumed.headers["x-vercel-ai-ui-message-stream"] == "v1"
    got = chunks(resumed.content)
    # From the start chunk, the same message, then live to its end.
    assert got[0] == seen[0] and got[0]["type"] == "start"
    assert text(got) == "".join(WORDS) and got[-1]["finishReason"] == "stop"
    assert resumed.content.endswith(b"data: [DONE]\n\n")
    assert [r.status_code for r in over] == [204, 204]


async def test_another_principals_or_unknown_chat_is_204_on_every_server(redis_url: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with two_servers(redis_url) as ((first, second), _), httpx.AsyncClient() as http:
            await first_chunks(http, first, "chat-u")
            unknown = await http.get(f"{second}/never/stream")
    assert unknown.status_code == 204


#: policy -> (the new POST's status, the old answer's last chunk types, its finish metadata)
ACROSS = {
    "interrupt": (200, ["abort", "finish"], None),
    "rollback": (200, ["abort", "finish"], {"uamp.on_busy": "rollback"}),
    "reject": (409, ["finish-step", "finish"], None),
    "enqueue": (200, ["finish-step", "finish"], None),
}


@pytest.mark.parametrize("policy", list(ACROSS))
async def test_a_post_on_the_other_server_meets_the_busy_policy(
    redis_url: str, policy: str
) -> None:
    status, ending, marked = ACROSS[policy]
    with trio.fail_after(TIMEOUT):
        async with (
            two_servers(redis_url) as ((first, second), _),
            httpx.AsyncClient() as http,
            http.stream("POST", first, json=body("chat-s")) as old,
        ):
            parts = old.aiter_bytes()
            await parts.__anext__()
            new = await http.post(second, json={**body("chat-s"), "uamp.on_busy": policy})
            rest = b"".join([part async for part in parts])
    ended = chunks(rest)
    assert [c["type"] for c in ended][-2:] == ending
    meta = ended[-1].get("messageMetadata") or {}
    assert meta.get("uamp.on_busy") == (marked or {}).get("uamp.on_busy")
    assert new.status_code == status
    if status == 200:
        assert text(chunks(new.content)) == "".join(WORDS)
    else:
        assert new.json()["error"]["code"] == "conversation_busy"


def test_a_resume_after_the_writer_was_killed_ends_interrupted(redis_url: str) -> None:
    # Real processes: the one streaming the answer dies with SIGKILL (no
    # goodbye); the other replays what the log holds, then says it stopped.
    store = ("--store", redis_url, "--agent", "tests._support.agents:Ticker")
    doomed = spawn_serve(*store)
    try:
        first = wait_for_line(doomed, r"serving on (http://[\d.]+:\d+)").group(1)
        with uamp_serve(*store) as second, httpx.Client(timeout=TIMEOUT) as http:
            url = "/agents/ticker/ai-sdk"
            seen = b""
            with http.stream("POST", first + url, json=body("chat-k")) as r:
                for part in r.iter_bytes():
                    seen += part
                    if seen.count(b"text-delta") >= 3:
                        break
                doomed.kill()
                doomed.wait(10)
            resumed = http.get(f"{second}{url}/chat-k/stream")
            after = http.get(f"{second}{url}/chat-k/stream")
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(10)
    assert resumed.status_code == 200
    got = chunks(resumed.content)
    assert got[0] == chunks(seen)[0]  # from its start chunk
    assert text(got).startswith(text(chunks(seen)))
    assert [c["type"] for c in got][-2:] == ["error", "finish"]
    assert got[-1]["finishReason"] == "interrupted"
    assert resumed.content.endswith(b"data: [DONE]\n\n")
    assert after.status_code == 204  # the lost answer is over
