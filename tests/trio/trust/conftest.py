"""Fixtures the trust tests share: a counting agent behind a JWT-authenticated app."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from uamp_trio.app import App, create_app

from .agents import CountingAgent
from .issuer import Issuer


@pytest.fixture
def agent() -> CountingAgent:
    """The agent the app hosts; counts the turns that reach it."""
    return CountingAgent()


@pytest.fixture
def app(agent: CountingAgent, tmp_path: Path) -> App:
    """Every transport, gated by tokens of the test issuer (no leeway on expiry)."""
    return create_app([agent], authenticator=Issuer().authenticator(tmp_path, leeway=0))


@pytest.fixture
async def served(app: App, serve_app: Any) -> Any:
    """A server for ``app`` on 127.0.0.1 for the length of the test."""
    return await serve_app(app)
