"""Route patterns: literal paths with ``{name}`` segments, compiled to regexes.

A ``{name}`` matches one path segment (anything but ``/``; dots are ordinary
characters, so ``/agents/{agent}/uamp`` matches ``/agents/alice.bot/uamp``).
Shared by every server binding's router.
"""

from __future__ import annotations

import re

__all__ = ["compile_pattern"]

_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The regex of ``pattern``; its groups are named after the ``{name}`` segments.

    Raises:
        ValueError: The pattern does not start with ``/``.
    """
    if not pattern.startswith("/"):
        raise ValueError(f"route pattern must start with '/': {pattern!r}")
    out, pos = [], 0
    for m in _PARAM.finditer(pattern):
        out.append(re.escape(pattern[pos : m.start()]))
        out.append(f"(?P<{m.group(1)}>[^/]+)")
        pos = m.end()
    out.append(re.escape(pattern[pos:]))
    return re.compile("^" + "".join(out) + "$")
