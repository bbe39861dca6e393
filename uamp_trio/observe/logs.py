"""Log lines as operators expect them: timestamps, one access line per request, JSON on demand.

:func:`configure` sets up the ``uamp serve`` logging once: every record gets
a UTC timestamp, in plain text (``--log-format text``) or as one JSON object
per line (``--log-format json``, for log shippers). :class:`AccessLog` is an
:class:`~uamp_trio.observe.requests.Observe` listener that writes one line
per finished request to the ``uamp.access`` logger, whatever ``--log-level``
says for the rest. An access line holds no secret: the path is logged
without its query string (``?token=`` stays out) and no header is logged.

A text line is one line whatever a peer sent: control characters in the
message (a percent-encoded CR LF in a path, an escape sequence in a reason
a client gave) are written as ``\\xNN``, so no one can forge a line or drive
the operator's terminal. JSON lines are escaped by JSON itself.

``uamp serve``'s handler gathers the lines logged on the event loop's
thread and writes them together a few milliseconds later
(:mod:`~uamp_trio.observe.gather`). When an access line would reach that
handler and nothing else (no other handler, filter or formatter in the
way), :class:`AccessLog` formats the line itself and hands it over,
without a ``LogRecord``: the same text as the formatters', held to them by
a test.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Any, Literal, TextIO

import orjson

from .gather import GatheredHandler
from .requests import Exchange

__all__ = ["ACCESS_LOGGER", "LOG_FORMATS", "LOG_LEVELS", "AccessLog", "configure"]

#: The logger access lines go to.
ACCESS_LOGGER = "uamp.access"
#: What ``--log-format`` accepts.
LOG_FORMATS = ("text", "json")
#: What ``--log-level`` accepts.
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")

LogFormat = Literal["text", "json"]


#: The last whole second formatted, and its text (most lines share a second).
_second: tuple[int, str] = (-1, "")


def _second_text(whole: int) -> str:
    """``2026-01-02T03:04:05``: the whole second ``whole`` (cached: most lines share one)."""
    global _second
    if _second[0] != whole:
        _second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)))
    return _second[1]


def _timestamp(created: float) -> str:
    whole = int(created)
    # (created - whole is created % 1 for a time after 1970, without fmod)
    return f"{_second_text(whole)}.{int((created - whole) * 1000):03d}Z"


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escape_control(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def one_line(text: str) -> str:
    """``text`` with its control characters written as ``\\xNN`` (one line, no terminal codes)."""
    # A printable text has none (the check is a tenth of the search's cost);
    # one that is not may still have none (a non-ASCII space), the search says.
    if text.isprintable() or _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(_escape_control, text)


class TextFormatter(logging.Formatter):
    """``2026-01-02T03:04:05.678Z INFO logger: message`` (an access line: no level, no logger)."""

    def format(self, record: logging.LogRecord) -> str:
        ts = _timestamp(record.created)
        message = one_line(record.getMessage())
        if record.name == ACCESS_LOGGER:
            return f"{ts} {message}"
        line = f"{ts} {record.levelname} {record.name}: {message}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JSONFormatter(logging.Formatter):
    """One JSON object per record: ``ts``, ``level``, ``logger``, ``message`` and its fields."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            data.update(fields)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(data).decode()


def configure(level: str, log_format: LogFormat, *, stream: TextIO | None = None) -> None:
    """Log records at ``level`` or above (access lines always) to ``stream`` (stderr).

    Lines logged on a trio loop's thread are gathered and written a few
    milliseconds later (:class:`~uamp_trio.observe.gather.GatheredHandler`).
    """
    handler = GatheredHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Access lines are asked for by --access-log, not by --log-level.
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.INFO)


class AccessLog:
    """Writes one line per finished request to the ``uamp.access`` logger.

    Text: ``client "METHOD path HTTP/v" status duration agent=... transport=...``;
    the JSON formatter gets the same values as fields.
    """

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger(ACCESS_LOGGER)
        #: A text line's parts around its status and duration, by the fields
        #: they hold (see :meth:`_new_parts`): most lines repeat an earlier one's.
        self._parts: dict[tuple[str, str, str, str, bool, str, str], tuple[str, str]] = {}

    def finished(self, exchange: Exchange) -> None:
        """Log ``exchange``."""
        logger = self.logger
        if not logger.isEnabledFor(logging.INFO):
            return
        handler = _direct_handler(logger)
        if handler is None:
            self._log(logger, self._args(exchange), _fields(exchange, exchange.duration * 1000))
            return
        formatter = handler.formatter
        if type(formatter) is TextFormatter and logger.name == ACCESS_LOGGER:
            # TextFormatter's line (the conversions of _ACCESS_FORMAT: str,
            # int, one decimal), put together from cached parts: the timestamp
            # has no control character to escape, its milliseconds come from a
            # table; the fields' parts are escaped once, when first seen.
            now = time.time()
            whole = int(now)
            second = _second[1] if _second[0] == whole else _second_text(whole)
            key = (
                exchange.client,
                exchange.method,
                exchange.path,
                exchange.http_version,
                exchange.websocket,
                exchange.agent,
                exchange.transport,
            )
            parts = self._parts.get(key) or self._new_parts(key)
            status = exchange.status
            handler.write_line(
                f"{second}{_MILLIS[int((now - whole) * 1000)]}{parts[0]}"
                f"{_STATUS_TEXT.get(status) or f'{status:d} '}"
                f"{exchange.duration * 1000:.1f}{parts[1]}"
            )
            return
        ms = exchange.duration * 1000
        if type(formatter) is JSONFormatter:
            data = {
                "ts": _timestamp(time.time()),
                "level": "info",
                "logger": logger.name,
                "message": _ACCESS_FORMAT % self._args(exchange),
                **_fields(exchange, ms),
            }
            handler.write_line(orjson.dumps(data).decode())
            return
        self._log(logger, self._args(exchange), _fields(exchange, ms))

    def _new_parts(self, key: tuple[str, str, str, str, bool, str, str]) -> tuple[str, str]:
        """The text before a line's status and after its duration, kept for the next lines.

        Each part escaped as :func:`one_line` escapes a whole line (character
        by character, so the same text). Bounded: a table of
        :data:`_PARTS_KEPT` is emptied, a path over 256 characters not kept.
        """
        client, method, path, http_version, websocket, agent, transport = key
        version = "WebSocket" if websocket else "HTTP/" + http_version
        parts = (
            one_line(f'{client!s} "{method!s} {path!s} {version}" '),
            one_line(f"ms agent={agent!s} transport={transport!s}"),
        )
        if len(path) <= 256:
            if len(self._parts) >= _PARTS_KEPT:
                self._parts.clear()
            self._parts[key] = parts
        return parts

    @staticmethod
    def _args(exchange: Exchange) -> tuple[Any, ...]:
        """The values of :data:`_ACCESS_FORMAT` for ``exchange``."""
        version = "WebSocket" if exchange.websocket else "HTTP/" + exchange.http_version
        return (
            exchange.client,
            exchange.method,
            exchange.path,
            version,
            exchange.status,
            exchange.duration * 1000,
            exchange.agent,
            exchange.transport,
        )

    @staticmethod
    def _log(logger: logging.Logger, args: tuple[Any, ...], fields: dict[str, Any]) -> None:
        """The general path: a record through ``logging``'s handlers and formatters."""
        # The record is made here rather than by logger.info, which would look
        # up its caller in the stack (this line, every time) for each request.
        record = logger.makeRecord(
            logger.name,
            logging.INFO,
            "(unknown file)",
            0,
            _ACCESS_FORMAT,
            args,
            None,
            extra={"fields": fields},
        )
        logger.handle(record)

    def stream_opened(self, exchange: Exchange) -> None:
        """Nothing: the line is written when the stream ends."""

    def stream_closed(self, exchange: Exchange) -> None:
        """Nothing: :meth:`finished` follows."""


_ACCESS_FORMAT = '%s "%s %s %s" %d %.1fms agent=%s transport=%s'
#: A text access line: the timestamp (``_timestamp``'s: the second, then
#: ``_MILLIS[milliseconds]``), then the message.
_TEXT_LINE = "%s%s" + _ACCESS_FORMAT
#: ``.000Z `` to ``.999Z ``: a timestamp's milliseconds (an index, not a format).
_MILLIS = tuple(f".{ms:03d}Z " for ms in range(1000))
#: ``"200 "``: a status and the space after it, as ``%d`` writes it (a lookup, not a format).
_STATUS_TEXT = {status: f"{status:d} " for status in range(100, 600)}
#: Line parts an access log keeps (a new client, path or agent is a new entry).
_PARTS_KEPT = 512


def _fields(exchange: Exchange, ms: float) -> dict[str, Any]:
    """An access line's values, as JSON lines carry them."""
    return {
        "client": exchange.client,
        "method": exchange.method,
        "path": exchange.path,
        "http_version": exchange.http_version,
        "status": exchange.status,
        "duration_ms": round(ms, 3),
        "agent": exchange.agent,
        "transport": exchange.transport,
        "websocket": exchange.websocket,
    }


def _direct_handler(logger: logging.Logger) -> GatheredHandler | None:
    """The one handler ``logger``'s records reach, if a gathered handler with no filter.

    What ``logging`` would do with an INFO record of ``logger``: walk up to
    the root while loggers propagate, handing it to each handler on the way.
    When that reaches exactly one :class:`GatheredHandler` (``uamp serve``'s),
    with no filter on the way and its level passing INFO, the access line
    can be formatted and written without a record.
    """
    found: logging.Handler | None = None
    current = logger
    while True:
        if current.filters or current.disabled:
            return None
        handlers = current.handlers
        if handlers:  # (most loggers on the way have none)
            if found is not None or len(handlers) != 1:
                return None
            found = handlers[0]
        parent = current.parent
        if parent is None or not current.propagate:
            break
        current = parent
    if type(found) is GatheredHandler and not found.filters and found.level <= logging.INFO:
        return found
    return None
