"""Hand-written structure/unstructure hooks for the hottest events."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cattrs import Converter


def structure_hooks(conv: Converter) -> dict[str, Callable[[Any, Any], Any]]:
    return {}


def unstructure_hooks(conv: Converter) -> dict[type[Any], Callable[[Any], Any]]:
    return {}
