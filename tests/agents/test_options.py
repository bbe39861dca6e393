"""Factories refuse options out of range with a ValueError naming the option."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from uamp_agents.execution import loop
from uamp_agents.middleware import budget


@pytest.mark.parametrize(
    ("factory", "options", "words"),
    [
        (loop, {"max_iterations": 0}, "max_iterations"),
        (loop, {"structure_retries": -1}, "structure_retries"),
        (budget, {"max_tokens": 0}, "max_tokens must be positive"),
        (budget, {"max_seconds": -1}, "max_seconds"),
    ],
)
def test_bad_options_are_refused(
    factory: Callable[..., Any], options: dict[str, float], words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        factory(**options)
