"""Fixtures: one fake server per provider, started in the test's nursery.

``provider_server`` is each of them in turn (for the tests every vendor
must pass alike); :data:`PROVIDERS` builds each vendor's provider against
its fake server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
import trio

from uamp_agents.providers import Provider, anthropic, google, openai
from uamp_agents.providers._anthropic import AnthropicProvider
from uamp_agents.providers._google import GoogleProvider
from uamp_agents.providers._openai import OpenAIProvider

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


def openai_provider(server: FakeServer, **kw: Any) -> OpenAIProvider:
    """``gpt-4o-mini`` against ``server``, retrying without a long wait."""
    kw.setdefault("retry_base_delay", 0.01)
    return openai("gpt-4o-mini", api_key=OPENAI_KEY, base_url=f"{server.url}/v1", **kw)


def anthropic_provider(server: FakeServer, **kw: Any) -> AnthropicProvider:
    """``claude-sonnet-4-5`` against ``server``, retrying without a long wait."""
    kw.setdefault("retry_base_delay", 0.01)
    return anthropic("claude-sonnet-4-5", api_key=ANTHROPIC_KEY, base_url=server.url, **kw)


def google_provider(server: FakeServer, **kw: Any) -> GoogleProvider:
    """``gemini-2.5-flash`` against ``server``, retrying without a long wait."""
    kw.setdefault("retry_base_delay", 0.01)
    return google("gemini-2.5-flash", api_key=GOOGLE_KEY, base_url=f"{server.url}/v1beta", **kw)


#: Each vendor's name -> its provider against a fake server.
PROVIDERS: dict[str, Callable[..., Provider]] = {
    "openai": openai_provider,
    "anthropic": anthropic_provider,
    "google": google_provider,
}

_AUTH = {"openai": _openai_auth, "anthropic": _anthropic_auth, "google": _google_auth}


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


@pytest.fixture(params=sorted(PROVIDERS))
async def provider_server(
    request: pytest.FixtureRequest, nursery: trio.Nursery
) -> AsyncIterator[tuple[str, FakeServer]]:
    """(vendor name, its fake server), once for each vendor."""
    name: str = request.param
    async for server in _start(nursery, FakeServer(_AUTH[name])):
        yield name, server
