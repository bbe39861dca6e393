"""OpenTelemetry spans of real requests, collected with the SDK's in-memory exporter.

A real server on 127.0.0.1 hosts the UAP demo agent (its offline model calls
the ``add`` tool for "what is 2+3?"); the callers send a W3C ``traceparent``
over HTTP (plain and streamed Chat Completions) and on a WebSocket upgrade.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx
import pytest
import trio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from trio_websocket import open_websocket_url

from tests._support.cli import UAMP_SCRIPT, Served
from tests._support.wire import create_session, send, serving, until
from uamp_agents.bridge import demo_agent, serve_agent
from uamp_agents.tracing import set_tracer
from uamp_trio.app import create_app
from uamp_trio.observe.tracing import TracedAgent, Tracing

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
PARENT_ID = 0x00F067AA0BA902B7
TRACEPARENT = f"00-{TRACE_ID:032x}-{PARENT_ID:016x}-01"
ASK = {"messages": [{"role": "user", "content": "what is 2+3?"}]}


@pytest.fixture
def tracing() -> Iterator[Tracing]:
    found = Tracing.in_memory()
    set_tracer(found.runtime)
    yield found
    set_tracer(None)


def spans(tracing: Tracing) -> list[ReadableSpan]:
    assert tracing.exporter is not None
    return list(tracing.exporter.get_finished_spans())  # type: ignore[attr-defined]


def one(found: list[ReadableSpan], name: str) -> ReadableSpan:
    named = [s for s in found if s.name == name]
    assert len(named) == 1, [s.name for s in found]
    return named[0]


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def server_span(found: list[ReadableSpan], name: str, status: int) -> Any:
    """The request's SERVER span, continuing the caller's trace."""
    span = one(found, name)
    assert span.kind == SpanKind.SERVER
    assert span.context.trace_id == TRACE_ID
    assert parent_id(span) == PARENT_ID
    assert span.attributes is not None
    assert span.attributes["http.response.status_code"] == status
    return span


def check_agent_tree(found: list[ReadableSpan], server: ReadableSpan) -> None:
    """The agent run under the request; model and tool calls under the run."""
    run = one(found, "invoke_agent demo")
    assert parent_id(run) == server.context.span_id
    assert run.context.trace_id == TRACE_ID
    assert run.attributes is not None
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.agent.name"] == "demo"
    chats = [s for s in found if s.name == "chat uamp-demo-1"]
    assert len(chats) == 2  # asks for the tool, then answers with its result
    for chat in chats:
        assert parent_id(chat) == run.context.span_id
        assert chat.kind == SpanKind.CLIENT
        attrs = chat.attributes or {}
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.provider.name"] == "demo"
        assert attrs["gen_ai.request.model"] == "uamp-demo-1"
        assert int(attrs["gen_ai.usage.input_tokens"]) > 0  # type: ignore[arg-type]
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in chats] == [  # type: ignore[index]
        ("tool_calls",),
        ("stop",),
    ]
    tool = one(found, "execute_tool add")
    assert parent_id(tool) == run.context.span_id
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.tool.name"] == "add"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert chats[0].end_time <= tool.start_time  # type: ignore[operator]
    assert tool.end_time <= chats[1].start_time  # type: ignore[operator]


async def test_http_request_continues_the_callers_trace(tracing: Tracing) -> None:
    app = create_app([serve_agent(demo_agent("demo"))], tracing=tracing)
    async with serving(app) as server, httpx.AsyncClient() as http:
        r = await http.post(
            f"{server.url}/agents/demo/chat/completions",
            json=ASK,
            headers={"traceparent": TRACEPARENT},
        )
        assert r.status_code == 200
        assert "5" in r.json()["choices"][0]["message"]["content"]
    found = spans(tracing)
    request = server_span(found, "POST /agents/{agent}/chat/completions", 200)
    assert request.attributes["http.route"] == "/agents/{agent}/chat/completions"
    assert request.attributes["gen_ai.agent.name"] == "demo"
    check_agent_tree(found, request)


async def test_streamed_response_is_inside_its_request_span(tracing: Tracing) -> None:
    app = create_app([serve_agent(demo_agent("demo"))], tracing=tracing)
    async with serving(app) as server, httpx.AsyncClient() as http:
        body = {**ASK, "stream": True}
        async with http.stream(
            "POST",
            f"{server.url}/agents/demo/chat/completions",
            json=body,
            headers={"traceparent": TRACEPARENT},
        ) as r:
            text = (await r.aread()).decode()
        assert text.rstrip().endswith("data: [DONE]")
    found = spans(tracing)
    request = one(found, "POST /agents/{agent}/chat/completions")
    check_agent_tree(found, request)
    run = one(found, "invoke_agent demo")
    assert request.end_time >= run.end_time  # type: ignore[operator]


async def test_websocket_upgrade_continues_the_callers_trace(tracing: Tracing) -> None:
    app = create_app([serve_agent(demo_agent("demo"))], tracing=tracing)
    async with serving(app) as server:
        url = server.url.replace("http://", "ws://") + "/agents/demo/uamp"
        async with open_websocket_url(url, extra_headers=[("traceparent", TRACEPARENT)]) as ws:
            await create_session(ws)
            await send(ws, type="input.text", text="what is 2+3?")
            await send(ws, type="response.create")
            events = await until(ws, "response.done")
            assert any(e["type"] == "response.delta" for e in events)
        await trio.sleep(0.2)  # the server notices the close and ends the span
    found = spans(tracing)
    connection = server_span(found, "GET /agents/{agent}/uamp", 101)
    check_agent_tree(found, connection)


async def test_without_a_traceparent_a_request_starts_a_trace(tracing: Tracing) -> None:
    app = create_app([serve_agent(demo_agent("demo"))], tracing=tracing)
    async with serving(app) as server, httpx.AsyncClient() as http:
        r = await http.get(f"{server.url}/agents/nobody/v1/models")
        assert r.status_code == 404
    request = one(spans(tracing), "GET /agents/{agent}/v1/models")
    assert request.parent is None
    assert request.attributes is not None
    assert request.attributes["http.response.status_code"] == 404


def test_an_untraced_app_wraps_nothing() -> None:
    agent = serve_agent(demo_agent("demo"))
    plain = create_app([agent])
    assert plain.middleware == []
    assert plain.agents["demo"] is agent
    traced = create_app([agent], tracing=Tracing.in_memory())
    assert isinstance(traced.agents["demo"], TracedAgent)
    assert len(traced.middleware) == 1


# --- uamp serve --otel: the real command exporting over OTLP/HTTP ----------------------


class _Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: keeps every span it is sent."""

    received: ClassVar[list[Any]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        for resource in export.resource_spans:
            for scope in resource.scope_spans:
                self.received.extend(scope.spans)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_uamp_serve_otel_exports_spans_over_otlp() -> None:
    collector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{collector.server_address[1]}"
    try:
        with Served(
            [UAMP_SCRIPT, "serve", "--port", "0", "--otel"],
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"},
        ) as srv:
            r = httpx.post(
                srv.url() + "/agents/demo/chat/completions",
                json=ASK,
                headers={"traceparent": TRACEPARENT},
                timeout=10,
            )
            assert r.status_code == 200
        assert srv.proc.returncode == 0
    finally:
        collector.shutdown()
    by_name = {span.name: span for span in _Collector.received}
    assert {
        "POST /agents/{agent}/chat/completions",
        "invoke_agent demo",
        "execute_tool add",
    } <= set(by_name)
    request = by_name["POST /agents/{agent}/chat/completions"]
    assert request.trace_id == TRACE_ID.to_bytes(16, "big")
    assert request.parent_span_id == PARENT_ID.to_bytes(8, "big")
    assert by_name["invoke_agent demo"].parent_span_id == request.span_id
