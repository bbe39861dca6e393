"""Fixtures the trust tests share: a counting agent behind a JWT-authenticated app."""

from __future__ import annotations

from collections.abc import Iterator
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


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server for the whole test session; the URL of its ``postgres`` database."""
    from tests._support.postgres_server import running_postgres

    with running_postgres() as url:
        yield url


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A new empty database on the session's PostgreSQL server."""
    from tests._support.postgres_server import create_database

    return create_database(postgres_server)
