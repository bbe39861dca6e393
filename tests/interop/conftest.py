"""Fixtures shared by the interop tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._support.cache import cache_folder
from tests._support.peer_venv import webagents_python as install


@pytest.fixture(scope="session")
def webagents_python() -> Path:
    """The python of a throwaway virtualenv with webagents installed (installed once)."""
    return install(
        cache_folder("webagents-0.3.9"), "import webagents.agents.skills.robutler.portal_connect"
    )
