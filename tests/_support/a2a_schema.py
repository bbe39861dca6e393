"""The A2A 1.0 JSON schema (shipped in ``uamp_trio/transports/a2a/spec``), as validators.

The schema's definitions refer to each other by names like
``lf.a2a.v1.TaskStatus.jsonschema.json``; a :mod:`referencing` registry maps
those names to the definitions so ``jsonschema`` can follow them.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

import uamp_trio.transports.a2a

SCHEMA_PATH = Path(uamp_trio.transports.a2a.__file__).parent / "spec" / "a2a.json"


@cache
def _registry() -> tuple[dict[str, Any], Registry[Any]]:
    definitions: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())["definitions"]
    resources = []
    for name, sub in definitions.items():
        camel = name.replace(" ", "")
        resource = Resource.from_contents(sub, default_specification=DRAFT202012)
        for prefix in ("lf.a2a.v1.", "a2a.v1.", "google.protobuf."):
            resources.append((f"{prefix}{camel}.jsonschema.json", resource))
    return definitions, Registry().with_resources(resources)


def validator(definition: str) -> Draft202012Validator:
    """A validator for one definition (``"Agent Card"``, ``"Task"`` ...)."""
    definitions, registry = _registry()
    return Draft202012Validator(definitions[definition], registry=registry)


def problems(definition: str, value: Any) -> list[str]:
    """Every way ``value`` fails ``definition`` (empty: it validates)."""
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator(definition).iter_errors(value)
    ]
