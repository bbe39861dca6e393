"""``serve_options`` maps ``uamp serve``'s store and busy flags onto ``uamp_asgi.Config``.

``--store WHERE`` (with the retention and A2A task limits) opens the stores
``uamp serve --store WHERE`` opens; a session an ASGI app built from those
options serves is found in that SQLite file by a reader of its own. Left at
their defaults, the flags leave ``Config``'s own memory stores.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import trio

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto import types as ty
from uamp_proto.codec import from_dict
from uamp_proto.responder import TurnRequest
from uamp_proto.sse import SSEParser
from uamp_stores import MemoryEventLog, open_event_log
from uamp_stores.a2a_tasks import MemoryTaskStore
from uamp_stores.event_log_sqlite import SqliteEventLog
from uamp_trio.asgi_options import serve_options


async def echo(turn: TurnRequest) -> AsyncIterator[str]:
    """Says back what it was told."""
    yield f"You said: {turn.messages[-1].text}"


def test_defaults_keep_the_configs_own_memory_stores() -> None:
    options = serve_options([])
    assert "event_log" not in options and "a2a_tasks" not in options
    config = uamp_asgi.Config(**options)
    assert isinstance(config.event_log, MemoryEventLog)
    assert config.event_log.max_sessions_per_principal == 256
    assert (config.on_busy, config.busy_max_queued, config.busy_max_queued_per_principal) == (
        "enqueue",
        8,
        32,
    )


def test_busy_flags_reach_the_config() -> None:
    flags = [
        "--on-busy",
        "reject",
        "--busy-max-queued",
        "3",
        "--busy-max-queued-per-principal",
        "5",
    ]
    config = uamp_asgi.Config(**serve_options(flags))
    assert (config.on_busy, config.busy_max_queued, config.busy_max_queued_per_principal) == (
        "reject",
        3,
        5,
    )


def test_the_output_bound_flag_reaches_the_config() -> None:
    assert uamp_asgi.Config(**serve_options([])).max_response_output_bytes == 32 * 1024 * 1024
    flags = ["--max-response-output-bytes", "4096"]
    assert uamp_asgi.Config(**serve_options(flags)).max_response_output_bytes == 4096


def test_the_history_budget_flag_reaches_the_config() -> None:
    default = uamp_asgi.Config(**serve_options([])).max_history_bytes_per_principal
    assert default == 16 * 1024 * 1024
    flags = ["--max-history-bytes-per-principal", "5000"]
    assert uamp_asgi.Config(**serve_options(flags)).max_history_bytes_per_principal == 5000


def test_a_task_limit_alone_opens_uamp_serves_memory_stores() -> None:
    options = serve_options(["--a2a-max-tasks", "7", "--retention-events", "11"])
    tasks, log = options["a2a_tasks"], options["event_log"]
    assert isinstance(tasks, MemoryTaskStore) and tasks.max_tasks == 7
    assert isinstance(log, MemoryEventLog) and log.retention.max_events == 11


def test_a_store_flag_logs_the_apps_sessions_in_that_file(tmp_path: Path) -> None:
    where = f"sqlite:{tmp_path / 'sessions.db'}"
    options = serve_options(["--store", where, "--api-key", "alice:sk-a", "--retention-age", "60"])
    assert isinstance(options["event_log"], SqliteEventLog)
    assert options["event_log"].retention.max_age == 60
    app = uamp_asgi.app(function_agent(echo, name="echo"), config=uamp_asgi.Config(**options))
    with uvicorn_server(app) as url, httpx.Client(base_url=url, timeout=20) as http:
        http.headers["authorization"] = "Bearer sk-a"
        create = {"type": "session.create", "session": {"modalities": ["text"]}}
        made = http.post("/agents/echo/events", json=create)
        assert made.status_code == 200, made.text
        sid = made.json()["session_id"]
        ask = [{"type": "input.text", "text": "one"}, {"type": "response.create"}]
        posted = http.post("/agents/echo/events", json=ask, headers={"x-session-id": sid})
        assert posted.status_code == 200, posted.text
        seen: list[dict[str, object]] = []
        parser = SSEParser()
        headers = {"x-session-id": sid}
        with http.stream("GET", "/agents/echo/events/stream", headers=headers) as stream:
            for chunk in stream.iter_raw():
                seen += [orjson.loads(e.data) for e in parser.feed(chunk)]
                if any(e["type"] == "response.done" for e in seen):
                    break
        last = str(seen[-1]["event_id"])
        key = (("api_key", "alice"), sid)

        async def logged() -> Any:
            log = open_event_log(where)  # the file, as another process reads it
            try:
                with trio.fail_after(20):
                    while await log.find(key, last) is None:
                        await trio.sleep(0.02)
                return await log.load(key)
            finally:
                await log.aclose()

        record = trio.run(logged)
    history = [from_dict(ty.Message, m) for m in record.history]
    assert [(m.role, m.text) for m in history] == [("user", "one"), ("assistant", "You said: one")]
