"""What a model can do, as far as uamp knows it: the capabilities a served agent reports.

A provider that knows its model answers ``model_info()`` itself (the demo
model does). For the hosted providers the answer comes from :data:`KNOWN`,
a table of model families by name prefix, with figures from the providers'
published model pages; a model the table does not know gets ``None`` and the
agent's own declaration stands (:func:`uamp_agents.bridge.serve_agent`).
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["KNOWN", "ModelInfo", "model_info"]


@attrs.frozen(kw_only=True)
class ModelInfo:
    """The capability facts of one model (UAMP section 9's fields).

    ``None`` means not known.
    """

    modalities: tuple[str, ...] = ("text",)
    supports_thinking: bool | None = None
    supports_tools: bool | None = None
    supports_parallel_tools: bool | None = None
    supports_caching: bool | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None


_VISION = ("text", "image")
_VISION_PDF = ("text", "image", "file")
_ALL = ("text", "image", "audio", "video", "file")

#: (provider, model name prefix, modalities, thinking, context window, output
#: limit); every model listed calls tools, several at once, and caches prompts.
_TABLE: tuple[tuple[str, str, tuple[str, ...], bool, int, int], ...] = (
    # OpenAI
    ("openai", "gpt-4o", _VISION, False, 128_000, 16_384),
    ("openai", "gpt-4.1", _VISION, False, 1_047_576, 32_768),
    ("openai", "gpt-5", _VISION, True, 400_000, 128_000),
    ("openai", "o3", _VISION, True, 200_000, 100_000),
    ("openai", "o4-mini", _VISION, True, 200_000, 100_000),
    # Anthropic: Claude 3.x, then the 4 family
    ("anthropic", "claude-3-5", _VISION_PDF, False, 200_000, 8_192),
    ("anthropic", "claude-3-7", _VISION_PDF, True, 200_000, 64_000),
    *(
        ("anthropic", f"claude-{tier}-4", _VISION_PDF, True, 200_000, output)
        for tier, output in (("sonnet", 64_000), ("opus", 32_000), ("haiku", 64_000))
    ),
    # Google
    ("google", "gemini-2.5", _ALL, True, 1_048_576, 65_536),
    ("google", "gemini-2.0", _ALL, False, 1_048_576, 8_192),
)

#: (provider, model name prefix) -> facts; the longest matching prefix wins.
KNOWN: dict[tuple[str, str], ModelInfo] = {
    (provider, prefix): ModelInfo(
        modalities=modalities,
        supports_thinking=thinking,
        supports_tools=True,
        supports_parallel_tools=True,
        supports_caching=True,
        context_window=window,
        max_output_tokens=output,
    )
    for provider, prefix, modalities, thinking, window, output in _TABLE
}


def model_info(provider: Any) -> ModelInfo | None:
    """What ``provider``'s default model can do, or ``None`` when unknown.

    The provider's own ``model_info()`` answers first; else the longest
    prefix of its model name in :data:`KNOWN` for its provider name.
    """
    own = getattr(provider, "model_info", None)
    if callable(own):
        info = own()
        if info is not None:
            return info  # type: ignore[no-any-return]
    name, model = getattr(provider, "name", None), getattr(provider, "model", None)
    if not isinstance(name, str) or not isinstance(model, str):
        return None
    best: ModelInfo | None = None
    best_len = -1
    for (known_provider, prefix), info in KNOWN.items():
        if known_provider == name and model.startswith(prefix) and len(prefix) > best_len:
            best, best_len = info, len(prefix)
    return best
