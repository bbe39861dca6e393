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
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Any, Literal, TextIO

import orjson

from .requests import Exchange

__all__ = ["ACCESS_LOGGER", "LOG_FORMATS", "LOG_LEVELS", "AccessLog", "configure"]

#: The logger access lines go to.
ACCESS_LOGGER = "uamp.access"
#: What ``--log-format`` accepts.
LOG_FORMATS = ("text", "json")
#: What ``--log-level`` accepts.
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")

LogFormat = Literal["text", "json"]


def _timestamp(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escape_control(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def one_line(text: str) -> str:
    """``text`` with its control characters written as ``\\xNN`` (one line, no terminal codes)."""
    if _CONTROL.search(text) is None:
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
    """Log records at ``level`` or above (access lines always) to ``stream`` (stderr)."""
    handler = logging.StreamHandler(stream or sys.stderr)
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

    def finished(self, exchange: Exchange) -> None:
        """Log ``exchange``."""
        logger = self.logger
        if not logger.isEnabledFor(logging.INFO):
            return
        ms = exchange.duration * 1000
        version = "WebSocket" if exchange.websocket else f"HTTP/{exchange.http_version}"
        fields = {
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
        args = (
            exchange.client,
            exchange.method,
            exchange.path,
            version,
            exchange.status,
            ms,
            exchange.agent,
            exchange.transport,
        )
        # The record is made here rather than by logger.info, which would look
        # up its caller in the stack (this line, every time) for each request.
        record = logger.makeRecord(
            logger.name,
            logging.INFO,
            "(unknown file)",
            0,
            '%s "%s %s %s" %d %.1fms agent=%s transport=%s',
            args,
            None,
            extra={"fields": fields},
        )
        logger.handle(record)

    def stream_opened(self, exchange: Exchange) -> None:
        """Nothing: the line is written when the stream ends."""

    def stream_closed(self, exchange: Exchange) -> None:
        """Nothing: :meth:`finished` follows."""
