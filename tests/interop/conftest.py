"""Fixtures shared by the interop tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._support.cache import cache_folder
from tests._support.peer_venv import peer_python
from tests._support.peer_venv import webagents_python as install


@pytest.fixture(scope="session")
def webagents_python() -> Path:
    """The python of a throwaway virtualenv with webagents installed (installed once)."""
    return install(
        cache_folder("webagents-0.3.9"), "import webagents.agents.skills.robutler.portal_connect"
    )


@pytest.fixture(scope="session")
def a2a_sdk_0_3_python() -> Path:
    """The python of a throwaway virtualenv with a2a-sdk 0.3 (the 1.x SDK is the project's)."""
    return peer_python(
        cache_folder("a2a-sdk-0.3.26"), ("a2a-sdk[signing]==0.3.26",), "import a2a.utils.signing"
    )
