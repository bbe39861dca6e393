"""The access log's direct path writes what ``logging`` would; gathered lines are never lost.

:class:`AccessLog` formats a line itself when it would reach ``uamp serve``'s
gathered handler and nothing else: these tests hold that line to the one the
general path (a record through the formatters) writes, for text and JSON,
and check that the gathered handler writes every line, in order, whether
logged on the loop's thread, on another thread, or at the loop's end.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from http import HTTPStatus

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from uamp_trio.observe import gather
from uamp_trio.observe.gather import GatheredHandler
from uamp_trio.observe.logs import (
    ACCESS_LOGGER,
    AccessLog,
    JSONFormatter,
    TextFormatter,
    _direct_handler,
    _timestamp,
)
from uamp_trio.observe.requests import Exchange

EXCHANGES = [
    Exchange(0.0, "127.0.0.1:5000", "POST", "/agents/demo/chat/completions", "1.1", "completions", "demo", status=200, duration=0.00123),  # noqa: E501
    Exchange(0.0, "-", "GET", "/ws", "1.1", "uamp_ws", "-", websocket=True, status=101, duration=8.2104),  # noqa: E501
    Exchange(0.0, "[::1]:9", "GET", "/no/\r\nsuch\x1b[31m", "2", "-", "-", status=404, duration=0.0, error="not_found"),  # noqa: E501
]  # fmt: skip


def _logger(
    stream: io.StringIO, formatter: logging.Formatter
) -> tuple[logging.Logger, GatheredHandler]:
    logger = logging.Logger(ACCESS_LOGGER)  # outside the global tree: no root in the way
    handler = GatheredHandler(stream)
    handler.setFormatter(formatter)
    logger.addHandler(handler)
    return logger, handler


def _without_ts(line: str, formatter: logging.Formatter) -> object:
    if isinstance(formatter, JSONFormatter):
        data = json.loads(line)
        assert data.pop("ts").endswith("Z")
        return data
    ts, rest = line.split(" ", 1)
    assert ts.endswith("Z") and len(ts) == 24
    return rest


@pytest.mark.parametrize("formatter", [TextFormatter(), JSONFormatter()], ids=["text", "json"])
@pytest.mark.parametrize("exchange", EXCHANGES)
def test_the_direct_line_is_the_records_line(
    formatter: logging.Formatter, exchange: Exchange
) -> None:
    direct, general = io.StringIO(), io.StringIO()
    logger, _ = _logger(direct, formatter)
    assert _direct_handler(logger) is not None
    AccessLog(logger).finished(exchange)
    logger, _ = _logger(general, formatter)
    logger.addFilter(lambda record: True)  # a filter: the general path
    assert _direct_handler(logger) is None
    AccessLog(logger).finished(exchange)
    lines = direct.getvalue().splitlines(), general.getvalue().splitlines()
    assert len(lines[0]) == len(lines[1]) == 1
    assert _without_ts(lines[0][0], formatter) == _without_ts(lines[1][0], formatter)


def test_another_handler_or_a_filter_takes_the_general_path() -> None:
    logger, handler = _logger(io.StringIO(), TextFormatter())
    assert _direct_handler(logger) is handler
    other = logging.StreamHandler(io.StringIO())
    logger.addHandler(other)
    assert _direct_handler(logger) is None
    logger.removeHandler(other)
    handler.addFilter(lambda record: True)
    assert _direct_handler(logger) is None
    handler.filters.clear()
    handler.setLevel(logging.WARNING)
    assert _direct_handler(logger) is None


@pytest.fixture
def period(monkeypatch: pytest.MonkeyPatch) -> float:
    """A gathering period long enough that no pause of a loaded machine ends it unnoticed."""
    monkeypatch.setattr(gather, "GATHER_SECONDS", 0.3)
    monkeypatch.setattr(gather, "GATHER_LATEST", 0.3)
    return 0.3


def test_a_batch_no_line_writes_waits_until_its_latest_time() -> None:
    """Not the end of its period: the next request's line usually comes by then.

    Fails with the flusher's deadline at the end of the period (it used to
    wake an otherwise idle server for a quarter of the requests at a few
    dozen a second).
    """
    stream = io.StringIO()
    handler = GatheredHandler(stream)
    assert gather.GATHER_LATEST >= 5 * gather.GATHER_SECONDS

    async def main() -> None:
        handler.write_line("one")  # at once
        handler.write_line("two")  # gathered: the flusher armed
        start = trio.current_time()
        await trio.sleep(gather.GATHER_LATEST * 0.9)  # periods over, no line since
        assert stream.getvalue() == "one\n"
        await trio.sleep(gather.GATHER_LATEST * 0.2)
        assert stream.getvalue() == "one\ntwo\n"
        assert trio.current_time() - start >= gather.GATHER_LATEST

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


async def _until(stream: io.StringIO, text: str) -> None:
    with trio.fail_after(10):
        while stream.getvalue() != text:
            await trio.sleep(0.01)


def test_lines_of_the_loop_are_gathered_then_all_written_in_order(period: float) -> None:
    stream = io.StringIO()
    handler = GatheredHandler(stream)

    async def main() -> None:
        handler.write_line("one")  # the first after a quiet period: at once
        assert stream.getvalue() == "one\n"
        handler.write_line("two")  # within the period: gathered
        handler.write_line("three")
        assert stream.getvalue() == "one\n"
        await _until(stream, "one\ntwo\nthree\n")  # at the end of the period
        handler.write_line("four")  # right after that write: gathered
        # A line from another thread is written at once, after what was gathered.
        await trio.to_thread.run_sync(handler.write_line, "five")
        assert stream.getvalue() == "one\ntwo\nthree\nfour\nfive\n"
        handler.write_line("six")  # still gathered when the loop ends

    trio.run(main)
    assert stream.getvalue() == "one\ntwo\nthree\nfour\nfive\nsix\n"


def test_a_full_batch_is_written_at_once_and_flush_writes_the_rest(period: float) -> None:
    stream = io.StringIO()
    handler = GatheredHandler(stream)
    count = gather.GATHER_LINES + 2

    async def main() -> None:
        for i in range(count):
            handler.write_line(str(i))
        # The first at once; then GATHER_LINES gathered, written when full; one left.
        assert stream.getvalue().splitlines() == [str(i) for i in range(count - 1)]
        handler.flush()  # what logging does at exit
        assert stream.getvalue().splitlines() == [str(i) for i in range(count)]

    trio.run(main)


def test_outside_a_loop_a_line_is_written_at_once() -> None:
    stream = io.StringIO()
    handler = GatheredHandler(stream)
    handler.write_line("now")
    assert stream.getvalue() == "now\n"
    done = threading.Event()

    def other() -> None:
        handler.write_line("there")
        done.set()

    threading.Thread(target=other).start()
    assert done.wait(10)
    assert stream.getvalue() == "now\nthere\n"


@given(st.floats(min_value=0, max_value=2**34, allow_nan=False))
def test_the_timestamp_is_the_utc_second_and_its_milliseconds(created: float) -> None:
    second = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    assert _timestamp(created) == f"{second}.{int(created % 1 * 1000):03d}Z"


@pytest.mark.parametrize("created", [1765051201.0, 1765051201.0004, 1765051201.9996, 1765051201.5])
def test_the_direct_lines_timestamp_is_the_formatters(
    created: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The direct text line's milliseconds come from a table: the same text as ``_timestamp``."""
    monkeypatch.setattr(time, "time", lambda: created)
    stream = io.StringIO()
    logger, _ = _logger(stream, TextFormatter())
    AccessLog(logger).finished(EXCHANGES[0])
    assert stream.getvalue().split(" ", 1)[0] == _timestamp(created)


def test_a_line_past_the_period_writes_the_batch_with_it(
    period: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load the lines write their batches themselves: nothing has to wake up for them.

    A batch's first line arms the task's deadline; the line that writes the
    batch disarms it, so the task does not wake for nothing.
    """
    writes: list[str] = []

    class Counted(io.StringIO):
        """Counts the writes (a batch is one, however many lines it holds)."""

        def write(self, text: str) -> int:
            writes.append(text)
            return super().write(text)

    stream = Counted()
    handler = GatheredHandler(stream)
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])  # (the module gather reads)

    async def main() -> None:
        handler.write_line("one")  # at once
        handler.write_line("two")  # gathered: the task's deadline armed
        assert stream.getvalue() == "one\n"
        clock[0] += period + 0.01  # no checkpoint in between: the loop's task cannot run
        handler.write_line("three")  # writes the batch (and disarms the deadline)
        assert stream.getvalue() == "one\ntwo\nthree\n"
        assert len(writes) == 2
        await trio.sleep(period * 2)  # past the batch's deadline: the task slept on
        assert len(writes) == 2
        handler.write_line("four")  # a new batch, written at the end of its period
        await _until(stream, "one\ntwo\nthree\nfour\n")
        assert len(writes) == 3

    trio.run(main)


_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)


@given(
    client=_TEXT,
    method=_TEXT,
    path=_TEXT,
    agent=_TEXT,
    transport=_TEXT,
    websocket=st.booleans(),
    status=st.integers(90, 610) | st.integers() | st.sampled_from(list(HTTPStatus)),
    duration=st.floats(min_value=0, max_value=1e4, allow_nan=False),
)
def test_the_direct_line_from_kept_parts_is_the_records_line(
    client: str,
    method: str,
    path: str,
    agent: str,
    transport: str,
    websocket: bool,
    status: int,
    duration: float,
) -> None:
    """Whatever the fields hold (controls included, any status: the text of the usual ones
    comes from a table), cold and warm: the formatter's line."""
    exchange = Exchange(
        0.0, client, method, path, "1.1", transport, agent, websocket, status, duration
    )
    general = io.StringIO()
    logger, _ = _logger(general, TextFormatter())
    logger.addFilter(lambda record: True)
    AccessLog(logger).finished(exchange)
    expected = _without_ts(general.getvalue().splitlines()[0], TextFormatter())
    direct = io.StringIO()
    logger, _ = _logger(direct, TextFormatter())
    access = AccessLog(logger)
    access.finished(exchange)  # the parts made
    access.finished(exchange)  # the parts kept
    lines = direct.getvalue().split("\n")
    assert lines[2] == ""
    assert _without_ts(lines[0], TextFormatter()) == expected
    assert _without_ts(lines[1], TextFormatter()) == expected


def test_the_kept_parts_and_client_texts_are_bounded() -> None:
    from uamp_trio.observe import logs, requests

    logger, _ = _logger(io.StringIO(), TextFormatter())
    access = AccessLog(logger)
    for i in range(logs._PARTS_KEPT + 10):
        access.finished(Exchange(0.0, "-", "GET", f"/p{i}", "1.1", "-", "-", status=200))
    assert 0 < len(access._parts) <= logs._PARTS_KEPT
    access._parts.clear()
    access.finished(Exchange(0.0, "-", "GET", "/" + "x" * 300, "1.1", "-", "-", status=200))
    assert not access._parts  # a long path is formatted, not kept
    for port in range(requests._CLIENTS_KEPT + 10):
        assert requests._client_text(("10.0.0.1", port)) == f"10.0.0.1:{port}"
    assert 0 < len(requests._CLIENTS) <= requests._CLIENTS_KEPT
    assert requests._client_text(None) == "-"
