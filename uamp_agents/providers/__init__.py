"""Model providers for the agent runtime.

Factories: :func:`openai` (any OpenAI-compatible Chat Completions server),
:func:`anthropic` (Messages API), :func:`google` (Gemini), :func:`demo`
(offline, deterministic) and :func:`function` (a Python function as a model,
for tests). Each lives in its own private module, imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import base
from .base import *  # noqa: F403  (the provider interface: base.__all__)

if TYPE_CHECKING:
    from ._anthropic import anthropic
    from ._demo import demo
    from ._function import function
    from ._google import google
    from ._openai import openai

__all__ = [*base.__all__, "anthropic", "demo", "function", "google", "openai"]

_FACTORIES = frozenset({"openai", "anthropic", "google", "demo", "function"})


def __getattr__(name: str) -> Any:
    if name in _FACTORIES:
        module = importlib.import_module(f"._{name}", __name__)
        factory = getattr(module, name)
        globals()[name] = factory
        return factory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
