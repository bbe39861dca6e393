"""JSON Patch (RFC 6902): the operations between two values, and applying them.

Used wherever uamp streams a JSON value that changes: AG-UI ``STATE_DELTA``
and spec 003 ``patch`` frames of structured output. :func:`diff` compares
objects member by member and arrays index by index (a growing array is one
``add`` per new item); :func:`apply` applies ``add``, ``remove``,
``replace`` and ``test``.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["apply", "diff", "pointer"]


def pointer(path: list[str | int]) -> str:
    """The RFC 6901 JSON Pointer of ``path`` (``~`` and ``/`` escaped)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def diff(old: Any, new: Any, path: list[str | int] | None = None) -> list[dict[str, Any]]:
    """The RFC 6902 operations that turn ``old`` into ``new``."""
    at: list[str | int] = path or []
    if isinstance(old, dict) and isinstance(new, dict):
        ops = [{"op": "remove", "path": pointer([*at, k])} for k in old if k not in new]
        for key, value in new.items():
            if key in old:
                ops.extend(diff(old[key], value, [*at, key]))
            else:
                ops.append({"op": "add", "path": pointer([*at, key]), "value": value})
        return ops
    if isinstance(old, list) and isinstance(new, list):
        ops = []
        for i in range(min(len(old), len(new))):
            ops.extend(diff(old[i], new[i], [*at, i]))
        ops.extend(
            {"op": "add", "path": pointer([*at, i]), "value": new[i]}
            for i in range(len(old), len(new))
        )
        ops.extend(
            {"op": "remove", "path": pointer([*at, i])} for i in reversed(range(len(new), len(old)))
        )
        return ops
    if old == new and type(old) is type(new):
        return []
    return [{"op": "replace", "path": pointer(at), "value": new}]


def _tokens(text: str) -> list[str]:
    if text == "":
        return []
    if not text.startswith("/"):
        raise ValueError(f"not a JSON pointer: {text!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in text[1:].split("/")]


def apply(doc: Any, patch: list[dict[str, Any]]) -> Any:
    """Apply RFC 6902 ``add``, ``remove``, ``replace`` and ``test`` operations.

    Returns the new document (the input is not modified).

    Raises:
        ValueError: an operation does not apply.
    """
    result = copy.deepcopy(doc)
    for op in patch:
        tokens = _tokens(op["path"])
        kind = op["op"]
        if not tokens:
            if kind in ("add", "replace"):
                result = op["value"]
                continue
            if kind == "test":
                if result != op["value"]:
                    raise ValueError("test failed at the root")
                continue
            raise ValueError(f"cannot {kind} the whole document")
        parent = result
        for t in tokens[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
        last = tokens[-1]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if kind == "add":
                parent.insert(index, op["value"])
            elif kind == "remove":
                del parent[index]
            elif kind == "replace":
                parent[index] = op["value"]
            elif kind == "test" and parent[index] != op["value"]:
                raise ValueError(f"test failed at {op['path']}")
        elif isinstance(parent, dict):
            if kind == "add":
                parent[last] = op["value"]
            elif kind in ("remove", "replace"):
                if last not in parent:
                    raise ValueError(f"no member at {op['path']}")
                if kind == "remove":
                    del parent[last]
                else:
                    parent[last] = op["value"]
            elif kind == "test" and parent.get(last) != op["value"]:
                raise ValueError(f"test failed at {op['path']}")
        else:
            raise ValueError(f"{op['path']} does not point into a container")
    return result
