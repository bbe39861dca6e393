"""Spec 003's error codes, its one error type, and the strict checks its values pass.

:mod:`uamp_proto.envelope` builds its types on these: the section 9 error
table (:class:`ErrorCode` and its constants), :class:`EnvelopeError` (every
refusal, with the JSON path of the offending member), and the checks of
Appendix A's formats (UUID, RFC 3339 date-time, absolute URI, the context
hash) and of plain JSON values (no NaN, no lone surrogate, 64-bit integers,
bounded depth). Each check raises :class:`EnvelopeError` or returns the value
it checked; none reads a clock. Every public name here also imports from
:mod:`uamp_proto.envelope`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from .errors import UampError

__all__ = [
    "BACKEND_BUSY",
    "ERROR_CODES",
    "MISSING_DELTA_SEQ",
    "PAYLOAD_TOO_LARGE",
    "UNAUTHENTICATED",
    "UNAUTHORIZED",
    "EnvelopeError",
    "ErrorCode",
    "is_date_time",
]

#: Deepest nesting of JSON values accepted in ``ext`` / ``payload``; orjson
#: itself stops at 255 levels, so deeper values could not be encoded anyway.
MAX_DEPTH: Final = 250


# --- error codes (section 9) -------------------------------------------------


@attrs.frozen(kw_only=True)
class ErrorCode:
    """One row of spec 003's error table (section 9).

    Attributes:
        code: The code as the spec writes it (``"4.09"``).
        condition: The spec's name for the condition.
        retryable: Whether the spec marks the error as worth retrying.
        retry_after: Whether a retry should wait for a ``Retry-After`` hint.
    """

    code: str
    condition: str
    retryable: bool
    retry_after: bool = False


#: 4.01: the peer is not authenticated (bad or missing signature or token).
UNAUTHENTICATED: Final = ErrorCode(code="4.01", condition="Unauthenticated", retryable=False)
#: 4.03: authenticated, but not allowed (wrong audience, missing scope).
UNAUTHORIZED: Final = ErrorCode(code="4.03", condition="Unauthorized", retryable=False)
#: 4.09: a ``delta_seq`` is missing from a stream; resend from the gap.
MISSING_DELTA_SEQ: Final = ErrorCode(code="4.09", condition="Missing delta_seq", retryable=True)
#: 4.13: the envelope or its body is larger than the receiver accepts.
PAYLOAD_TOO_LARGE: Final = ErrorCode(code="4.13", condition="Payload too large", retryable=False)
#: 5.04: the backend is busy; retry after the ``Retry-After`` delay.
BACKEND_BUSY: Final = ErrorCode(
    code="5.04", condition="Backend busy", retryable=True, retry_after=True
)

#: Every section 9 code by its string.
ERROR_CODES: Final[Mapping[str, ErrorCode]] = {
    e.code: e
    for e in (UNAUTHENTICATED, UNAUTHORIZED, MISSING_DELTA_SEQ, PAYLOAD_TOO_LARGE, BACKEND_BUSY)
}


# --- the error type -----------------------------------------------------------

PathSegment = str | int


def _render_path(path: Sequence[PathSegment]) -> str:
    out = ["$"]
    for seg in path:
        out.append(f"[{seg}]" if isinstance(seg, int) else f".{seg}")
    return "".join(out)


class EnvelopeError(UampError, ValueError):
    """An envelope or delta that breaks spec 003 (Appendix A schemas, section 4).

    Raised by the constructors of :mod:`uamp_proto.envelope`, its
    ``decode_envelope``, ``decode_delta`` and ``canonical_json``; never
    anything else for bad input.

    Attributes:
        path: Where the problem is, as segments (``("context", 1, "hash")``).
        reason: A sentence naming the problem.
        error_code: The section 9 code a receiver should answer with, when
            one fits (:data:`PAYLOAD_TOO_LARGE` for oversized input), else
            ``None``.
    """

    def __init__(
        self,
        path: Sequence[PathSegment],
        reason: str,
        *,
        error_code: ErrorCode | None = None,
    ) -> None:
        self.path: tuple[PathSegment, ...] = tuple(path)
        self.reason = reason
        self.error_code = error_code
        super().__init__(f"{self.where}: {reason}")

    @property
    def where(self) -> str:
        """The path rendered JSONPath-style: ``$.context[1].hash``."""
        return _render_path(self.path)

    def under(self, *prefix: PathSegment) -> EnvelopeError:
        """The same error, with ``prefix`` put in front of its path."""
        return EnvelopeError((*prefix, *self.path), self.reason, error_code=self.error_code)


# --- formats --------------------------------------------------------------------

# JSON Schema "uuid" is the bare 8-4-4-4-12 form; spec 003's own examples
# write ids as URNs ("urn:uuid:..."), so both are accepted. The version
# nibble is not checked: the schema does not ask for v4 specifically.
_UUID = re.compile(
    r"^(?:[uU][rR][nN]:[uU][uU][iI][dD]:)?"
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
# RFC 3339 date-time (JSON Schema "date-time"); ranges are checked by hand
# below because this module may not import datetime.
_DATE_TIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.\d+)?"
    r"(?:[Zz]|[+-](\d{2}):(\d{2}))$"
)
# RFC 3986 absolute URI, checked loosely: a scheme, a colon, and then no
# whitespace, controls or characters RFC 3986 never allows unescaped.
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:[^\s<>\"{}|\\^`\x00-\x1f\x7f]+$")
#: Appendix A.1, ``context[].hash``.
CONTEXT_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def is_date_time(value: str) -> bool:
    """Whether ``value`` is an RFC 3339 date-time (``2025-07-10T13:37:05Z``)."""
    m = _DATE_TIME.match(value)
    if m is None:
        return False
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    if not 1 <= month <= 12:
        return False
    days = 29 if month == 2 and _is_leap(year) else _DAYS_IN_MONTH[month - 1]
    if not 1 <= day <= days or hour > 23 or minute > 59 or second > 60:
        return False
    off_h, off_m = m.group(7), m.group(8)
    return off_h is None or (int(off_h) <= 23 and int(off_m) <= 59)


def check_utf8(value: str, path: Sequence[PathSegment]) -> None:
    """Refuse a string UTF-8 cannot encode."""
    # A lone surrogate (possible in a Python str, never in JSON text) has no
    # UTF-8 form, so it could not be sent or hashed.
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise EnvelopeError(path, "holds a lone surrogate, which UTF-8 cannot encode") from None


def need_str(value: object, path: Sequence[PathSegment]) -> str:
    """``value`` as a string UTF-8 can encode, else :class:`EnvelopeError` at ``path``."""
    if not isinstance(value, str):
        raise EnvelopeError(path, f"must be a string, not {kind_of(value)}")
    check_utf8(value, path)
    return value


def need_uuid(value: object, path: Sequence[PathSegment]) -> None:
    """Refuse what is not a UUID (bare or ``urn:uuid:``)."""
    if not _UUID.match(need_str(value, path)):
        raise EnvelopeError(path, f"must be a UUID or urn:uuid: URN, not {value!r}")


def need_date_time(value: object, path: Sequence[PathSegment]) -> None:
    """Refuse what is not an RFC 3339 date-time."""
    if not is_date_time(need_str(value, path)):
        raise EnvelopeError(
            path, f"must be an RFC 3339 date-time such as 2025-07-10T13:37:05Z, not {value!r}"
        )


def need_uri(value: object, path: Sequence[PathSegment]) -> None:
    """Refuse what is not an absolute URI."""
    if not _URI.match(need_str(value, path)):
        raise EnvelopeError(path, f"must be an absolute URI (scheme:rest), not {value!r}")


def need_int(value: object, path: Sequence[PathSegment], minimum: int) -> None:
    """Refuse what is not a JSON integer of at least ``minimum``."""
    # bool is an int subclass in Python but not an integer in JSON.
    if isinstance(value, bool) or not isinstance(value, int):
        raise EnvelopeError(path, f"must be an integer, not {kind_of(value)}")
    if value < minimum:
        raise EnvelopeError(path, f"must be at least {minimum}, not {value}")


def kind_of(value: object) -> str:
    """What JSON calls the type of ``value``, for an error message (``an array``)."""
    names = {
        type(None): "null",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "an array",
        tuple: "an array",
        dict: "an object",
    }
    return names.get(type(value), type(value).__name__)


def check_json(value: object, path: tuple[PathSegment, ...], depth: int = 0) -> None:
    """Refuse anything that is not plain JSON (or that JSON cannot carry exactly)."""
    if depth > MAX_DEPTH:
        raise EnvelopeError(path, f"is nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        check_utf8(value, path)
        return
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            raise EnvelopeError(path, "is an integer outside the 64-bit range JSON tools share")
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise EnvelopeError(path, "is NaN or infinite, which JSON cannot represent")
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_json(item, (*path, i), depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise EnvelopeError(path, f"has a non-string key {key!r}")
            check_utf8(key, path)
            check_json(item, (*path, key), depth + 1)
        return
    raise EnvelopeError(path, f"holds {kind_of(value)}, which is not a JSON value")


def need_object(value: object, path: Sequence[PathSegment]) -> dict[str, Any]:
    """``value`` as a JSON object, else :class:`EnvelopeError` at ``path``."""
    if not isinstance(value, dict):
        raise EnvelopeError(path, f"must be an object, not {kind_of(value)}")
    return value


def check_members(
    obj: Mapping[str, Any],
    path: Sequence[PathSegment],
    *,
    required: Sequence[str],
    allowed: frozenset[str] | None,
    what: str,
) -> None:
    """Refuse unknown members (when ``allowed`` is given) and missing required ones."""
    if allowed is not None:
        unknown = sorted(k for k in obj if k not in allowed)
        if unknown:
            names = ", ".join(repr(k) for k in unknown)
            raise EnvelopeError(
                path,
                f"unknown field(s) {names}: the {what} allows no additional properties "
                f"(spec 003 Appendix A); allowed: {', '.join(sorted(allowed))}",
            )
    missing = [k for k in required if k not in obj]
    if missing:
        names = ", ".join(repr(k) for k in missing)
        raise EnvelopeError(path, f"missing required field(s) {names} of the {what}")


def as_tuple(value: Any) -> Any:
    """A list as a tuple (a frozen value holds no list); anything else as it is."""
    # Lists become tuples so the frozen value is immutable; anything else is
    # left for the validator to refuse with a proper message.
    return tuple(value) if isinstance(value, list) else value


def check_extra(extra: Mapping[str, Any], known: frozenset[str]) -> None:
    """Refuse ``extra`` members that are not plain JSON or that name a declared field."""
    if not isinstance(extra, Mapping):
        raise EnvelopeError((), f"extra must be a mapping, not {kind_of(extra)}")
    clash = sorted(k for k in extra if k in known)
    if clash:
        raise EnvelopeError((clash[0],), "is a declared field; pass it as one, not in extra")
    check_json(dict(extra), ())
