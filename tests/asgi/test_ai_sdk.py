"""The AI SDK transport's resumable answers under uamp_asgi (uvicorn, asyncio), over real sockets.

An answer outlives the POST that started it and is found again by
``GET .../ai-sdk/{chatId}/stream``, only by its principal; answers nobody
reads are bounded per principal (a flood reproduced first), an answer's
bytes are bounded, a newer POST of the chat meets the busy policy, and on
a shared Redis log a resume on another process replays the answer from its
start. The npm ``ai`` client's own resume runs against both servers in
``tests/interop/test_ai_sdk_client.py``; a writer killed mid-answer is in
``tests/asgi/test_resume_stores.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import orjson
import pytest

import uamp_asgi
from tests._support.agents import Words
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.responder import TurnRequest
from uamp_stores.chat_answers import MAX_ANSWERS
from uamp_stores.event_log_redis import RedisEventLog
from uamp_trio.trust.auth import APIKeyAuthenticator

TIMEOUT = 30
WORDS = [f"w{n} " for n in range(30)]
KEYS = [("alice", "sk-alice"), ("mallory", "sk-mallory")]
ALICE = {"authorization": "Bearer sk-alice"}
MALLORY = {"authorization": "Bearer sk-mallory"}


def body(chat_id: str, text: str = "talk") -> dict[str, Any]:
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}
    return {"id": chat_id, "messages": [user]}


def chunks(raw: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(block[6:]) for block in raw.split(b"\n\n") if block.startswith(b"data: {")]


def text(got: list[dict[str, Any]]) -> str:
    return "".join(c["delta"] for c in got if c["type"] == "text-delta")


def first_chunks(http: httpx.Client, url: str, chat_id: str) -> list[dict[str, Any]]:
    """POST, read until the answer has said something, then leave (an aborted fetch)."""
    seen = b""
    with http.stream("POST", url, json=body(chat_id)) as r:
        assert r.status_code == 200
        for part in r.iter_bytes():
            seen += part
            if b"text-delta" in seen:
                break
    return chunks(seen)


async def megabytes(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Nine deltas of 1 MiB: past an answer's 8 MiB budget."""
    for _ in range(9):
        yield "x" * (1 << 20)


@pytest.fixture
def server() -> Iterator[str]:
    """slow (30 words, 50 ms apart), stuck (2 words, 30 s apart) and megabytes; two callers."""
    agents = [
        Words("slow", *WORDS, pause=0.05),
        Words("stuck", "a ", "b ", pause=30),
        function_agent(megabytes),
    ]
    config = uamp_asgi.Config(authenticator=APIKeyAuthenticator(KEYS))
    with uvicorn_server(uamp_asgi.app(agents, config=config)) as url:
        yield url


def test_a_left_answer_runs_on_and_a_resume_replays_it_from_the_start(server: str) -> None:
    url = f"{server}/agents/slow/ai-sdk"
    with httpx.Client(headers=ALICE, timeout=TIMEOUT) as http:
        seen = first_chunks(http, url, "chat-r")
        resumed = http.get(f"{url}/chat-r/stream")
        over = http.get(f"{url}/chat-r/stream")
    assert resumed.status_code == 200
    assert resumed.headers["x-vercel-ai-ui-message-stream"] == "v1"
    got = chunks(resumed.content)
    assert got[0] == seen[0] and got[0]["type"] == "start"  # the same message
    assert text(got) == "".join(WORDS) and got[-1]["finishReason"] == "stop"
    assert resumed.content.endswith(b"data: [DONE]\n\n")
    assert over.status_code == 204  # the answer is over: nothing to resume


def test_another_principals_chat_looks_like_none(server: str) -> None:
    url = f"{server}/agents/slow/ai-sdk"
    with httpx.Client(timeout=TIMEOUT) as http:
        with http.stream("POST", url, json=body("c"), headers=ALICE) as r:
            assert r.status_code == 200
            theirs = http.get(f"{url}/c/stream", headers=MALLORY)
            none = http.get(f"{url}/other/stream", headers=ALICE)
            with http.stream("GET", f"{url}/c/stream", headers=ALICE) as own:
                assert own.status_code == 200
        unauthenticated = http.get(f"{url}/c/stream")
    assert theirs.status_code == none.status_code == 204
    assert theirs.content == none.content == b""
    assert unauthenticated.status_code == 401


def test_each_caller_leaves_a_bounded_number_of_answers_running(server: str) -> None:
    # Answers outlive their requests: an abuser could start them and leave.
    # Every admitted answer counts until it ends, read or not.
    url = f"{server}/agents/stuck/ai-sdk"
    statuses: list[int] = []
    error = b""
    with httpx.Client(timeout=TIMEOUT) as http:
        with ExitStack() as held:
            reading = []  # (a dropped iterator closes its connection)
            for n in range(MAX_ANSWERS):
                r = held.enter_context(http.stream("POST", url, json=body(f"c{n}"), headers=ALICE))
                assert r.status_code == 200
                reading.append(r.iter_bytes())
                next(reading[-1])
            # Read or left, the bound holds.
            with http.stream("POST", url, json=body("read"), headers=ALICE) as r:
                assert r.status_code == 429
        # All left; their answers run on. The flood is refused.
        for n in range(10):
            with http.stream("POST", url, json=body(f"n{n}"), headers=ALICE) as r:
                statuses.append(r.status_code)
                if r.status_code == 429:
                    error = r.read()
        # Another caller is not starved by the flood.
        with http.stream("POST", url, json=body("m"), headers=MALLORY) as theirs:
            assert theirs.status_code == 200
        # A POST for a chat whose answer runs supersedes it: not refused.
        with http.stream("POST", url, json=body("c0"), headers=ALICE) as again:
            assert again.status_code == 200
    assert statuses == [429] * 10
    assert orjson.loads(error)["error"]["code"] == "too_many_answers"


@pytest.mark.parametrize("policy", ["enqueue", "interrupt"])
def test_a_newer_post_of_the_chat_meets_the_busy_policy(server: str, policy: str) -> None:
    url = f"{server}/agents/slow/ai-sdk"
    again = {**body("chat-s", "again"), "uamp.on_busy": policy}
    with (
        httpx.Client(headers=ALICE, timeout=TIMEOUT) as http,
        http.stream("POST", url, json=body("chat-s")) as old,
    ):
        parts = old.iter_bytes()
        next(parts)
        new = http.post(url, json=again)
        rest = b"".join(parts)
    ended = [c["type"] for c in chunks(rest)]
    if policy == "enqueue":  # the old answer ends first, whole; then the new one runs
        assert ended[-2:] == ["finish-step", "finish"]
    else:
        assert ended[-2:] == ["abort", "finish"]
    assert text(chunks(new.content)) == "".join(WORDS)


def test_an_answer_past_its_byte_budget_ends_with_an_error(server: str) -> None:
    with httpx.Client(headers=ALICE, timeout=TIMEOUT) as http:
        r = http.post(f"{server}/agents/megabytes/ai-sdk", json=body("big"))
    got = chunks(r.content)
    assert [c["type"] for c in got][-2:] == ["error", "finish"]
    assert "exceeded" in got[-2]["errorText"]
    assert len(r.content) < 9 << 20  # stopped before the agent said it all


@contextmanager
def two_servers(redis_url: str) -> Iterator[list[str]]:
    """Two uamp_asgi apps sharing one Redis event log (as two processes would)."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        urls = []
        for _ in range(2):
            log = RedisEventLog(redis_url, prefix=prefix)
            app = uamp_asgi.app(
                [Words("slow", *WORDS, pause=0.05)], config=uamp_asgi.Config(event_log=log)
            )
            urls.append(stack.enter_context(uvicorn_server(app)) + "/agents/slow/ai-sdk")
        yield urls


def test_a_resume_on_the_other_server_replays_from_the_start(redis_url: str) -> None:
    with two_servers(redis_url) as (first, second), httpx.Client(timeout=TIMEOUT) as http:
        seen = first_chunks(http, first, "chat-r")
        resumed = http.get(f"{second}/chat-r/stream")
        unknown = http.get(f"{second}/never/stream")
        over = [http.get(f"{url}/chat-r/stream") for url in (first, second)]
    assert resumed.status_code == 200
    got = chunks(resumed.content)
    assert got[0] == seen[0] and got[0]["type"] == "start"
    assert text(got) == "".join(WORDS) and got[-1]["finishReason"] == "stop"
    assert resumed.content.endswith(b"data: [DONE]\n\n")
    assert unknown.status_code == 204
    assert [r.status_code for r in over] == [204, 204]
