"""``pytest --no-system-installs``: the suite for a contributor without root or Debian.

By default a test that needs a system program (Debian's ``redis-server``,
``chromium`` and ``chromium-driver``; Node's ``npm``) installs it when it is
missing, as CI does as root. With ``--no-system-installs`` nothing is
installed: a test whose program is missing is skipped with the reason
``no system installs: needs ...``, and the run ends with the list of those
tests and what would let them run -- never a silent pass.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

__all__ = ["ENV_FLAG", "PREFIX", "installs_allowed", "missing"]

#: Set (by tests/conftest.py) in the environment of every test process.
ENV_FLAG = "UAMP_NO_SYSTEM_INSTALLS"
#: How such a skip's reason starts.
PREFIX = "no system installs: needs "


def installs_allowed() -> bool:
    """Whether a missing system program may be installed."""
    return not os.environ.get(ENV_FLAG)


def missing(program: str, how: str) -> NoReturn:
    """Skip the test: ``program`` is missing and may not be installed (``how`` would)."""
    pytest.skip(f"{PREFIX}{program} ({how})")
