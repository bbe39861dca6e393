"""``uamp serve --env-file .env``: ``NAME=value`` lines into the environment, as uvicorn does.

The format is the common ``.env`` one: one ``NAME=value`` a line, blank
lines and ``#`` comments skipped, an optional ``export`` before the name,
the value optionally in single quotes (kept as written) or double quotes
(``\\n``, ``\\t``, ``\\"`` and ``\\\\`` escapes), an unquoted value ending at
a `` #`` comment. A variable already set in the environment wins (the shell
is more specific than a file). Provider keys (``OPENAI_API_KEY``...) and
base URLs are read from the environment when an agent is loaded, which is
after this runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping
from pathlib import Path

__all__ = ["load_env_file", "parse_env"]

_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "r": "\r"}


def _value(raw: str, number: int, where: str) -> str:
    if raw[:1] == "'":
        end = raw.find("'", 1)
        if end < 0:
            raise ValueError(f"{where}:{number}: a quote is not closed")
        return raw[1:end]
    if raw[:1] == '"':
        out: list[str] = []
        i = 1
        while i < len(raw):
            char = raw[i]
            if char == "\\" and i + 1 < len(raw):
                out.append(_ESCAPES.get(raw[i + 1], "\\" + raw[i + 1]))
                i += 2
                continue
            if char == '"':
                return "".join(out)
            out.append(char)
            i += 1
        raise ValueError(f"{where}:{number}: a quote is not closed")
    comment = re.search(r"\s#", raw)
    return (raw[: comment.start()] if comment else raw).strip()


def parse_env(text: str, where: str = ".env") -> dict[str, str]:
    """The variables of an env file's ``text``.

    Raises:
        ValueError: A line that is not ``NAME=value`` (named by number, never by content,
            which may be a secret).
    """
    found: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise ValueError(f"{where}:{number}: expected NAME=value")
        found[match.group(1)] = _value(match.group(2), number, where)
    return found


def load_env_file(path: str, environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Set the variables of the file at ``path`` that ``environ`` does not have; their names.

    Raises:
        ValueError: The file cannot be read or is malformed (one line, naming ``--env-file``).
    """
    target = os.environ if environ is None else environ
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"--env-file {path}: cannot read it ({exc.strerror})") from None
    try:
        variables = parse_env(text, path)
    except ValueError as exc:
        raise ValueError(f"--env-file {exc}") from None
    added = [name for name in variables if name not in target]
    for name in added:
        target[name] = variables[name]
    return added
