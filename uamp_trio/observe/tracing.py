"""OpenTelemetry traces: a span per request, agent run, model call and tool call.

Needs the ``otel`` extra; nothing else in uamp imports OpenTelemetry, and an
app without a :class:`Tracing` creates no span at all.

Theory of operation
-------------------
A :class:`Tracing` owns its tracer (its own ``TracerProvider``: exporting over
OTLP/HTTP for ``uamp serve --otel``, or into memory for tests and benchmarks)
and plays three parts, each named and attributed after OpenTelemetry's
semantic conventions (HTTP server spans; GenAI agent, inference and tool
spans):

* :attr:`Tracing.middleware`, second in the app's chain: a ``SERVER`` span
  per HTTP request or WebSocket connection, ``METHOD /route/{pattern}``,
  whose parent is the caller's ``traceparent`` header (W3C trace context) when
  it sent one -- so a trace crosses agents that call each other over any
  transport. The span is current while the endpoint runs and, for a
  streaming response, while its body is produced; it ends with the response
  (status code, ``error.type`` for a 5xx);
* :meth:`Tracing.wrap_agent` wraps every hosted agent: an
  ``invoke_agent NAME`` span per run (conversation and response ids; an
  error's code as ``error.type``);
* :attr:`Tracing.runtime`, installed into the agent runtime by the command
  line (:func:`uamp_agents.tracing.set_tracer`): ``chat MODEL`` spans around
  model calls (provider, models, finish reason, token usage) and
  ``execute_tool NAME`` spans around tool calls.

Spans nest through the context of the running task (trio tasks inherit it),
so the runtime's spans land under the agent run's, which lands under the
request's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from uamp_proto.responder import Emit, Responder, TurnRequest

from ..engines.http import HTTPError, SendChunk, StreamingResponse
from ..hosting.agents import WrappedAgent
from ..hosting.middleware import Call, Next, Reply
from .requests import CURRENT

__all__ = ["Tracing"]


class _HeaderGetter(Getter[Any]):
    """Reads the ``traceparent``/``tracestate`` of a request's headers for the propagator."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        value = carrier.get(key)
        return None if value is None else [value]

    def keys(self, carrier: Any) -> list[str]:
        return [name for name, _ in carrier.items()]


_GETTER = _HeaderGetter()


class _Span:
    """An OpenTelemetry span as the runtime's :class:`~uamp_agents.tracing.CallSpan`."""

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def set(self, key: str, value: Any) -> None:
        if value is not None:
            self.span.set_attribute(key, value)


class _RuntimeTracer:
    """Model and tool call spans for the agent runtime (its ``RunTracer``)."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    @contextmanager
    def _call(self, name: str, kind: SpanKind, attributes: dict[str, Any]) -> Iterator[_Span]:
        with self.tracer.start_as_current_span(name, kind=kind, attributes=attributes) as span:
            yield _Span(span)

    def model_call(self, agent: str, provider: str, model: str) -> AbstractContextManager[_Span]:
        """A ``chat MODEL`` span (GenAI inference)."""
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "gen_ai.agent.name": agent,
        }
        return self._call(f"chat {model}", SpanKind.CLIENT, attributes)

    def tool_call(self, agent: str, tool: str, call_id: str) -> AbstractContextManager[_Span]:
        """An ``execute_tool NAME`` span (GenAI tool execution)."""
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
            "gen_ai.agent.name": agent,
        }
        return self._call(f"execute_tool {tool}", SpanKind.INTERNAL, attributes)


class TracedAgent(WrappedAgent):
    """A hosted agent whose every run is an ``invoke_agent`` span."""

    def __init__(self, agent: Responder, tracer: trace.Tracer) -> None:
        super().__init__(agent)
        self._tracer = tracer

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """Run the agent inside its span."""
        name = self.agent.name
        exchange = CURRENT.get()
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": name,
            "gen_ai.response.id": request.response_id,
        }
        if request.session_id:
            attributes["gen_ai.conversation.id"] = request.session_id
        if exchange is not None:
            attributes["uamp.transport"] = exchange.transport
        with self._tracer.start_as_current_span(
            f"invoke_agent {name}",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                await self.agent.respond(request, emit)
            except Exception as exc:
                span.set_attribute(
                    "error.type", str(getattr(exc, "code", None) or type(exc).__name__)
                )
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                raise


class Tracing:
    """The tracer of one app; see the module docstring.

    Args:
        provider: Where spans go (its processors and exporters).
        exporter: The in-memory exporter, for :meth:`in_memory`.
    """

    def __init__(self, provider: TracerProvider, exporter: SpanExporter | None = None) -> None:
        self.provider = provider
        self.exporter = exporter
        self.tracer = provider.get_tracer("uamp")
        #: Model and tool call spans, for :func:`uamp_agents.tracing.set_tracer`.
        self.runtime = _RuntimeTracer(self.tracer)

    @classmethod
    def exporting(cls) -> Tracing:
        """Export over OTLP/HTTP, configured by the standard ``OTEL_*`` variables.

        ``OTEL_EXPORTER_OTLP_ENDPOINT`` (default ``http://localhost:4318``),
        ``OTEL_SERVICE_NAME`` (default ``uamp``), the batch processor's
        ``OTEL_BSP_*``.
        """
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        service = os.environ.get("OTEL_SERVICE_NAME") or "uamp"
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        return cls(provider)

    @classmethod
    def in_memory(cls) -> Tracing:
        """Keep finished spans in memory (``exporter.get_finished_spans()``)."""
        exporter = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": "uamp"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        return cls(provider, exporter)

    def shutdown(self) -> None:
        """Flush and stop the exporters."""
        self.provider.shutdown()

    def wrap_agent(self, agent: Responder) -> Responder:
        """``agent``, each run traced."""
        return TracedAgent(agent, self.tracer)

    async def middleware(self, call: Call, call_next: Next) -> Reply:
        """A ``SERVER`` span around the call, child of the caller's ``traceparent``."""
        request = call.request
        route = call.pattern or request.path
        attributes: dict[str, Any] = {
            "http.request.method": request.method,
            "http.route": route,
            "url.path": request.path,
            "url.scheme": request.scheme,
            "network.protocol.version": request.http_version,
            "uamp.transport": call.route.transport,
        }
        if request.client is not None:
            attributes["client.address"] = request.client[0]
            attributes["client.port"] = request.client[1]
        agent = request.path_params.get("agent")
        if agent:
            attributes["gen_ai.agent.name"] = agent
        parent = propagate.extract(request.headers, getter=_GETTER)
        span = self.tracer.start_span(
            f"{request.method} {route}", context=parent, kind=SpanKind.SERVER, attributes=attributes
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        streaming = False
        try:
            reply = await call_next(call)
            if isinstance(reply, StreamingResponse):
                streaming = True
                self._trace_stream(reply, span)
            elif reply is not None:
                _end(span, reply.status)
            elif call.websocket is not None:
                _end(span, call.websocket.status or 500)
            return reply
        except HTTPError as exc:
            _end(span, exc.status)
            raise
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__name__)
            _end(span, 500)
            raise
        finally:
            otel_context.detach(token)
            if not streaming and span.is_recording():
                span.end()

    def _trace_stream(self, reply: StreamingResponse, span: trace.Span) -> None:
        produce = reply.producer
        status = reply.status

        async def producer(send: SendChunk) -> None:
            token = otel_context.attach(trace.set_span_in_context(span))
            try:
                await produce(send)
            except BaseException as exc:
                span.set_attribute("error.type", type(exc).__name__)
                raise
            finally:
                otel_context.detach(token)
                _end(span, status)
                span.end()

        reply.producer = producer


def _end(span: trace.Span, status: int) -> None:
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR))
        span.set_attribute("error.type", str(status))
