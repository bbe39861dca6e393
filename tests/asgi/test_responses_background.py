"""Responses ``background: true`` under uamp_asgi: ownership and bounds (real ``openai`` SDK).

The SDK's background flows (create, poll, resume with ``starting_after``,
cancel) run against both servers in ``tests/interop/test_openai_responses.py``.
Here a FastAPI app under uvicorn (asyncio) mounts ``uamp_asgi`` with its
responses in memory, a SQLite file or a real Redis, and two principals:
another principal's response id answers exactly like a missing one, on every
verb; a flood of background responses from one principal is refused past
its bound while another principal still gets room; a flood of stored
responses pushes out only the flooder's own.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import uamp_asgi
from tests._support import asgi
from uamp_asgi.responders import function_agent
from uamp_stores import MemoryEventLog
from uamp_stores.responses_background import MAX_BACKGROUND_PER_PRINCIPAL
from uamp_trio.trust.auth import APIKeyAuthenticator

pytest.importorskip("fastapi")

KEYS = [("alice", "sk-alice"), ("bob", "sk-bob")]
AGENTS = [function_agent(asgi.ticker), function_agent(asgi.slow)]


@pytest.fixture(params=["memory", "sqlite", "redis"])
def base(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """uamp_asgi in FastAPI, its responses in the store named; alice and bob may call."""
    store = asgi.event_log(request.param, tmp_path, request)
    with asgi.fastapi_with(AGENTS, authenticator=APIKeyAuthenticator(KEYS), event_log=store) as url:
        yield url


def _sdk(base: str, key: str = "sk-alice", agent: str = "ticker") -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{base}/agents/{agent}/v1",
        api_key=key,
        timeout=15,
        max_retries=0,
        _strict_response_validation=True,
    )


def _wait_for(sdk: openai.OpenAI, rid: str, *statuses: str) -> Any:
    deadline = time.monotonic() + 20
    while True:
        response = sdk.responses.retrieve(rid)
        if response.status in statuses or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


def _refusals(sdk: openai.OpenAI, rid: str) -> list[tuple[int, object, str]]:
    """What retrieve, stream, cancel and delete of ``rid`` answer (all 404s), id elided."""
    caught = []
    for call in (
        lambda: sdk.responses.retrieve(rid),
        lambda: list(sdk.responses.retrieve(rid, stream=True)),
        lambda: sdk.responses.cancel(rid),
        lambda: sdk.responses.delete(rid),
    ):
        with pytest.raises(openai.NotFoundError) as error:
            call()
        body = error.value.body
        assert isinstance(body, dict)
        message = str(body["message"]).replace(rid, "ID")
        caught.append((error.value.status_code, body.get("code"), message))
    return caught


def test_another_principals_response_answers_like_a_missing_one(base: str) -> None:
    alice, bob = _sdk(base, agent="slow"), _sdk(base, "sk-bob", agent="slow")
    running = alice.responses.create(model="slow", input="go", background=True)
    missing = f"resp_{uuid.uuid4().hex}"
    assert _refusals(bob, running.id) == _refusals(bob, missing)
    # Bob's tries changed nothing: alice's response still runs, and she cancels it.
    assert alice.responses.retrieve(running.id).status == "in_progress"
    assert alice.responses.cancel(running.id).status == "cancelled"


def test_a_flood_of_background_responses_is_bounded_per_principal(base: str) -> None:
    alice, bob = _sdk(base, agent="slow"), _sdk(base, "sk-bob", agent="slow")
    started = [
        alice.responses.create(model="slow", input="go", background=True)
        for _ in range(MAX_BACKGROUND_PER_PRINCIPAL)
    ]
    for _ in range(5):  # the flood goes on: each one more is refused, nothing runs
        with pytest.raises(openai.RateLimitError):
            alice.responses.create(model="slow", input="one more", background=True)
    # Another principal is not starved by alice's flood.
    theirs = bob.responses.create(model="slow", input="mine", background=True)
    assert theirs.status == "queued"
    alice.responses.cancel(started[0].id)
    again = alice.responses.create(model="slow", input="now there is room", background=True)
    for response in [*started[1:], again]:
        alice.responses.delete(response.id)
    bob.responses.delete(theirs.id)
    assert _sdk(base).responses.create(model="ticker", input="1", background=True).status == (
        "queued"
    )


def test_stored_responses_are_bounded_per_principal_in_memory() -> None:
    config = uamp_asgi.Config(
        authenticator=APIKeyAuthenticator(KEYS),
        event_log=MemoryEventLog(max_sessions=100, max_sessions_per_principal=5),
    )
    uamp_app = uamp_asgi.app(AGENTS, config=config)
    with asgi.uvicorn_server(uamp_app) as url:
        alice, bob = _sdk(url), _sdk(url, "sk-bob")
        kept = bob.responses.create(model="ticker", input="1", background=True)
        _wait_for(bob, kept.id, "completed")
        flood = [alice.responses.create(model="ticker", input="0") for _ in range(30)]
        # Alice keeps her last five; bob's response outlives her flood.
        assert bob.responses.retrieve(kept.id).output_text == "tick 0 "
        assert alice.responses.retrieve(flood[-1].id).status == "completed"
        with pytest.raises(openai.NotFoundError):
            alice.responses.retrieve(flood[0].id)


def test_a_response_whose_conversation_was_dropped_is_not_continued() -> None:
    # The memory log keeps at most 1,500 bytes of alice's conversations: the newer
    # response's pushes out the older's, which is then refused as a previous response.
    config = uamp_asgi.Config(
        authenticator=APIKeyAuthenticator(KEYS),
        event_log=MemoryEventLog(max_record_bytes_per_principal=1500),
    )
    uamp_app = uamp_asgi.app(AGENTS, config=config)
    with asgi.uvicorn_server(uamp_app) as url:
        alice = _sdk(url)
        padded = "0" + " " * 900  # the ticker reads the number; the spaces weigh
        older = alice.responses.create(model="ticker", input=padded)
        newer = alice.responses.create(model="ticker", input=padded)
        with pytest.raises(openai.BadRequestError, match="can no longer be continued"):
            alice.responses.create(model="ticker", input="1", previous_response_id=older.id)
        went_on = alice.responses.create(model="ticker", input="1", previous_response_id=newer.id)
        assert went_on.output_text == "tick 0 "
