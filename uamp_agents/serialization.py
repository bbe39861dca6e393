"""Validation and shared pieces of the UAP JSON formats (UAP section 13).

Theory of operation
-------------------
Sessions, thread trees and checkpoints are saved as plain JSON values whose
field names follow UAP section 13 (``SessionJSON``, ``ThreadTreeJSON``,
``ThreadNodeJSON``, ``CheckpointJSON``, ``ExecutionStateJSON``), camelCase
included, so a session written by another UAP implementation can be read
here and the other way round. Messages inside them use the uamp_proto wire
form (:func:`uamp_proto.codec.unstructure`), used as is (section 2.1).

Reading is strict and happens before anything is built (section 16.2): every
``from_json`` walks its input with a :class:`Reader`, which knows the path
of the value it holds (``threadTree.nodes[2].children[0]``) and raises
:class:`SerializationError` naming that path on the first problem. Keys a
format does not define are kept and written back (forward compatibility).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from uamp_proto import codec
from uamp_proto.codec import json_type_name as _json_type
from uamp_proto.types import Message

from .errors import SerializationError

__all__ = [
    "UAP_VERSION",
    "Reader",
    "SerializationError",
    "check_version",
    "extra_keys",
    "message_from_json",
    "message_to_json",
    "new_id",
    "now_iso",
]

#: The UAP version written into every SessionJSON (UAP section 13.1).
UAP_VERSION: Final = "1.0.0"

#: Versions with this major number are read; any other is refused (13.6 rule 8).
SUPPORTED_MAJOR: Final = 1

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:[-+].*)?$")


def new_id() -> str:
    """A fresh UUIDv4 as a string (UAP section 3.4)."""
    return str(uuid.uuid4())


def now_iso() -> str:
    """The current UTC time in ISO 8601 with millisecond precision and ``Z``."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def message_to_json(message: Message) -> dict[str, Any]:
    """The JSON form of one message (the uamp_proto wire form)."""
    value: dict[str, Any] = codec.unstructure(message)
    return value


def message_from_json(value: Any, path: str) -> Message:
    """Read one message, raising :class:`SerializationError` at ``path``."""
    if not isinstance(value, dict):
        raise SerializationError(path, f"must be an object, got {_json_type(value)}")
    try:
        message: Message = codec.from_dict(Message, value)
    except codec.DecodeError as exc:
        reason = str(exc)
        prefix = f"{Message.__name__}: "
        if reason.startswith(prefix):
            reason = reason[len(prefix) :]
        raise SerializationError(path, f"invalid message: {reason}") from None
    return message


def check_version(value: Any, path: str = "version") -> str:
    """Check a ``version`` field: a ``MAJOR.MINOR.PATCH`` string of UAP 1.

    Raises:
        SerializationError: Missing, not a version string, or another major.
    """
    if not isinstance(value, str):
        raise SerializationError(path, f"must be a version string, got {_json_type(value)}")
    match = _VERSION_RE.match(value)
    if match is None:
        raise SerializationError(path, f"{value!r} is not a MAJOR.MINOR.PATCH version")
    if int(match.group(1)) != SUPPORTED_MAJOR:
        raise SerializationError(
            path,
            f"unsupported UAP version {value!r} (this implementation reads "
            f"{SUPPORTED_MAJOR}.x, writes {UAP_VERSION})",
        )
    return value


def extra_keys(data: Mapping[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """The entries of ``data`` whose keys are not in ``known``, to write back."""
    return {k: v for k, v in data.items() if k not in known}


def _is_uuid4(value: str) -> bool:
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        return False
    return parsed.version == 4 and str(parsed) == value.lower()


class Reader:
    """A JSON object being read, with the path that leads to it.

    Each accessor returns the typed value of one key or raises
    :class:`SerializationError` naming ``path.key``.
    """

    def __init__(self, value: Any, path: str = "") -> None:
        if not isinstance(value, dict):
            raise SerializationError(path, f"must be an object, got {_json_type(value)}")
        self.data: dict[str, Any] = value
        self.path = path

    def at(self, key: str) -> str:
        """The path of ``key`` inside this object."""
        return f"{self.path}.{key}" if self.path else key

    def _get(self, key: str, required: bool) -> Any:
        if key not in self.data:
            if required:
                raise SerializationError(self.at(key), "is required")
            return None
        return self.data[key]

    def raw(self, key: str) -> Any:
        """A required value of any JSON type."""
        return self._get(key, True)

    def string(self, key: str) -> str:
        """A required string."""
        value = self._get(key, True)
        if not isinstance(value, str):
            raise SerializationError(self.at(key), f"must be a string, got {_json_type(value)}")
        return value

    def opt_str(self, key: str) -> str | None:
        """An optional string (absent or ``null`` give ``None``)."""
        value = self._get(key, False)
        if value is None:
            return None
        if not isinstance(value, str):
            raise SerializationError(
                self.at(key), f"must be a string or null, got {_json_type(value)}"
            )
        return value

    def uuid4(self, key: str) -> str:
        """A required UUIDv4 string (UAP section 3.4)."""
        value = self.string(key)
        if not _is_uuid4(value):
            raise SerializationError(self.at(key), f"must be a UUIDv4, got {value!r}")
        return value

    def opt_uuid4(self, key: str) -> str | None:
        """An optional UUIDv4 string."""
        if self._get(key, False) is None:
            return None
        return self.uuid4(key)

    def timestamp(self, key: str) -> str:
        """A required ISO 8601 timestamp with a time zone (UAP section 13.6)."""
        value = self.string(key)
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise SerializationError(
                self.at(key), f"must be an ISO 8601 timestamp, got {value!r}"
            ) from None
        if parsed.tzinfo is None:
            raise SerializationError(self.at(key), f"timestamp {value!r} has no time zone")
        return value

    def integer(self, key: str) -> int:
        """A required non-negative integer."""
        value = self._get(key, True)
        if isinstance(value, bool) or not isinstance(value, int):
            raise SerializationError(self.at(key), f"must be an integer, got {_json_type(value)}")
        if value < 0:
            raise SerializationError(self.at(key), f"must not be negative, got {value}")
        return value

    def obj(self, key: str) -> Reader:
        """A required object, as a reader."""
        return Reader(self._get(key, True), self.at(key))

    def opt_map(self, key: str) -> dict[str, Any]:
        """An optional free-form object (``metadata``); absent gives ``{}``."""
        value = self._get(key, False)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise SerializationError(self.at(key), f"must be an object, got {_json_type(value)}")
        return dict(value)

    def array(self, key: str, required: bool = True) -> list[tuple[str, Any]]:
        """A list, as ``(path, item)`` pairs; an absent optional list is empty."""
        value = self._get(key, required)
        if value is None and not required:
            return []
        if not isinstance(value, list):
            raise SerializationError(self.at(key), f"must be an array, got {_json_type(value)}")
        return [(f"{self.at(key)}[{i}]", item) for i, item in enumerate(value)]

    def opt_str_list(self, key: str) -> list[str] | None:
        """An optional list of strings."""
        if self._get(key, False) is None:
            return None
        out: list[str] = []
        for path, item in self.array(key):
            if not isinstance(item, str):
                raise SerializationError(path, f"must be a string, got {_json_type(item)}")
            out.append(item)
        return out

    def entries(self) -> Iterator[tuple[str, str, Any]]:
        """Every ``(path, key, value)`` of this object."""
        for key, value in self.data.items():
            yield self.at(key), key, value

    def messages(self, key: str) -> list[Message]:
        """A required list of messages."""
        return [message_from_json(item, path) for path, item in self.array(key)]
