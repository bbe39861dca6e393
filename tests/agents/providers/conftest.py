"""Fixtures: one fake server per provider, started in the test's nursery."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest
import trio

from .fakeserver import FakeServer, Request

OPENAI_KEY = "sk-test-openai"
ANTHROPIC_KEY = "sk-ant-test"
GOOGLE_KEY = "AIza-test-google"


def _openai_auth(request: Request) -> bytes | None:
    if request.headers.get("authorization") == f"Bearer {OPENAI_KEY}":
        return None
    return orjson.dumps(
        {
            "error": {
                "message": "Incorrect API key provided.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            }
        }
    )


def _anthropic_auth(request: Request) -> bytes | None:
    if (
        request.headers.get("x-api-key") == ANTHROPIC_KEY
        and request.headers.get("anthropic-version") == "2023-06-01"
    ):
        return None
    return orjson.dumps(
        {
            "type": "error",
            "error": {"type": "authentication_error", "message": "invalid x-api-key"},
        }
    )


def _google_auth(request: Request) -> bytes | None:
    if request.headers.get("x-goog-api-key") == GOOGLE_KEY:
        return None
    return orjson.dumps(
        {
            "error": {
                "code": 401,
                "message": "API key not valid. Please pass a valid API key.",
                "status": "UNAUTHENTICATED",
            }
        }
    )


async def _start(nursery: trio.Nursery, server: FakeServer) -> AsyncIterator[FakeServer]:
    await nursery.start(server.serve)
    yield server
    assert not server.failures, server.failures
    assert not server.replies, f"scripted replies left unused: {len(server.replies)}"


@pytest.fixture
async def openai_server(nursery: trio.Nursery) -> AsyncIterator[FakeServer]:
    """A fake OpenAI Chat Completions server."""
    async for server in _start(nursery, FakeServer(_openai_auth)):
        yield server


@pytest.fixture
async def anthropic_server(nursery: trio.Nursery) -> AsyncIterator[FakeServer]:
    """A fake Anthropic Messages server."""
    async for server in _start(nursery, FakeServer(_anthropic_auth)):
        yield server


@pytest.fixture
async def google_server(nursery: trio.Nursery) -> AsyncIterator[FakeServer]:
    """A fake Gemini server."""
    async for server in _start(nursery, FakeServer(_google_auth)):
        yield server
