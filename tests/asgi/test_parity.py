"""Parity: what ``uamp serve`` offers, ``uamp_asgi`` serves, or docs/embedding.md says it does not.

Two tables keep the promise honest:

* **Routes.** Every HTTP and WebSocket route of a ``uamp serve`` app with
  every transport (and the relay and metrics) is looked up in a
  ``uamp_asgi`` app. One the ASGI app does not serve must be in
  :data:`TRIO_ONLY_ROUTES`, with the words under which the docs' "What stays
  with ``uamp serve``" list names it; and an entry the ASGI app serves after
  all is refused too, so the list says only what is still true. A route
  added to ``uamp serve`` tomorrow fails here until the ASGI app serves it
  or the docs say it does not.
* **Features** within a route (:data:`FEATURES`): each is proven under
  ``uamp_asgi`` by a named test, which must exist, or named in that list.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Final

import attrs
import pytest

import uamp_asgi
from uamp_asgi.http import HTTPError

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "embedding.md"

#: ``"METHOD /path"`` (below ``/agents/{agent}``; ``WS`` for a WebSocket) of
#: what only ``uamp serve`` serves -> words of the docs' list that name it.
TRIO_ONLY_ROUTES: Final = {
    **{
        f"POST /lf.a2a.v1.A2AService/{method}": "gRPC"
        for method in (
            "SendMessage",
            "SendStreamingMessage",
            "GetTask",
            "ListTasks",
            "CancelTask",
            "SubscribeToTask",
            "CreateTaskPushNotificationConfig",
            "GetTaskPushNotificationConfig",
            "ListTaskPushNotificationConfigs",
            "DeleteTaskPushNotificationConfig",
            "GetExtendedAgentCard",
        )
    },
    "POST /uamp.v1.Agent/Send": "spec 003 envelopes",
    "POST /uamp.v1.Agent/Session": "spec 003 envelopes",
    "GET /v1/stream/{id}": "spec 003 envelopes",
    "POST /v1/stream/{id}": "spec 003 envelopes",
    "WS /uamp/1/ws": "spec 003 envelopes",
    "GET /.well-known/agent-manifest.json": "spec 003 envelopes",
    "GET /.well-known/agent-hub.json": "spec 003 envelopes",
    "WS /agents/connect": "the relay",
    "GET /agents": "the relay",
    "GET ": "the playground",
    "GET /": "the playground",
    "GET /playground/{file}": "the playground",
    "GET /docs": "OpenAPI",
    "GET /docs/{file}": "OpenAPI",
    "GET /openapi.json": "OpenAPI",
    "GET /healthz": "health",
    "GET /readyz": "health",
    "GET /version": "health",
    "POST /api/payments/tokens/{id}/topup": "payments API",
    "POST /tasks": "spec 004's A2A task routes",
    "GET /tasks/{task_id}": "spec 004's A2A task routes",
    "DELETE /tasks/{task_id}": "spec 004's A2A task routes",
}

#: Headers that satisfy the routes two transports share by header (Anthropic's ``/v1/models``).
_HEADERS: Final = {"anthropic-version": "2023-06-01", "x-api-key": "k"}


@attrs.frozen
class Feature:
    """Something ``uamp serve`` does within a transport's routes.

    ``proven``: the ``tests/...py::test_name`` showing ``uamp_asgi`` does it
    too; ``stays``: the words of the docs' list saying it does not.
    """

    transport: str
    what: str
    proven: str | None = None
    stays: str | None = None


FEATURES: Final = [
    Feature(
        "uamp",
        "resume from the event log",
        proven="tests/asgi/test_uamp_ws.py::test_a_dropped_connection_is_resumed_mid_response",
    ),
    Feature(
        "uamp",
        "payment held before the response",
        proven="tests/asgi/test_uamp_ws_payment.py::"
        "test_an_unpaid_turn_is_held_and_a_token_runs_it_and_is_charged_once",
    ),
    Feature(
        "uamp",
        "mid-response top-up (emitted)",
        proven="tests/asgi/test_uamp_ws_topup.py::"
        "test_a_paid_top_up_resumes_the_agent_where_it_was_and_is_charged",
    ),
    Feature(
        "uamp",
        "mid-response top-up (raised)",
        proven="tests/asgi/test_uamp_ws_topup.py::"
        "test_a_raised_top_up_is_held_then_run_again_on_the_output_so_far",
    ),
    Feature(
        "uamp",
        "voice calls",
        proven="tests/asgi/test_uamp_ws_voice.py::"
        "test_a_call_is_accepted_its_turns_answered_and_ended",
    ),
    Feature(
        "uamp",
        "server_vad and G.711",
        proven="tests/asgi/test_uamp_ws_voice.py::test_server_vad_g711_and_the_voice_in_a_call",
    ),
    Feature("uamp", "chat rooms", stays="chat rooms"),
    Feature("uamp", "human-in-the-loop interrupts", stays="human-in-the-loop interrupts"),
    Feature("uamp", "busy policies other than refusing", stays="busy policies"),
    Feature(
        "responses",
        "background responses",
        proven="tests/asgi/test_resume_stores.py::"
        "test_a_background_response_is_cancelled_from_the_other_process",
    ),
    Feature(
        "uamp",
        "session.update and capabilities.query answered",
        proven="tests/asgi/test_uamp_ws_session.py::"
        "test_session_update_is_answered_and_another_principals_token_refused",
    ),
    Feature(
        "uamp",
        "delta windows (docs/flow.md)",
        proven="tests/asgi/test_uamp_ws_session.py::"
        "test_a_delta_window_holds_deltas_until_acked_and_loses_none",
    ),
    Feature(
        "ai_sdk",
        "resumable streams",
        proven="tests/asgi/test_ai_sdk.py::"
        "test_a_left_answer_runs_on_and_a_resume_replays_it_from_the_start",
    ),
    Feature(
        "ai_sdk",
        "resumable streams across processes",
        proven="tests/asgi/test_resume_stores.py::"
        "test_an_ai_sdk_answer_its_process_died_in_resumes_then_ends_interrupted",
    ),
    Feature(
        "a2a",
        "tasks shared between processes",
        proven="tests/asgi/test_a2a_shared_tasks.py::"
        "test_a_task_made_on_one_process_is_got_followed_pushed_and_cancelled_on_another",
    ),
    Feature(
        "a2a",
        "push notifications (on by default, no Trio)",
        proven="tests/asgi/test_no_trio.py::"
        "test_an_app_pushing_to_a_webhook_under_uvicorn_loads_no_trio",
    ),
    Feature(
        "mcp",
        "progress notifications",
        proven="tests/interop/test_mcp_python_sdk.py::test_progress_carries_the_deltas",
    ),
    Feature(
        "mcp",
        "OAuth protected-resource metadata (RFC 9728)",
        proven="tests/asgi/test_mcp_resource.py::"
        "test_a_mounted_mcp_endpoint_names_its_metadata_below_the_mount",
    ),
    Feature("acp", "prompt/submit, tools/*, SSE answers", stays="prompt/submit"),
    Feature("acp", "stdio", stays="stdio"),
    Feature(
        "a2a",
        "the authenticated extended card",
        proven="tests/asgi/test_a2a_card_signing.py::"
        "test_the_extended_card_with_the_sdks_auth_interceptor",
    ),
    Feature(
        "anthropic",
        "ping on a silent stream",
        proven="tests/interop/test_anthropic_sdk.py::test_a_silent_agent_gets_pings",
    ),
    Feature(
        "realtime",
        "mid-response top-ups",
        proven="tests/asgi/test_realtime_topup.py::"
        "test_a_top_up_pauses_the_response_then_locks_more",
    ),
    Feature(
        "realtime",
        "busy policies other than refusing",
        proven="tests/interop/test_busy_realtime.py::"
        "test_interrupt_keeps_and_rollback_deletes_the_cancelled_item",
    ),
    Feature("server", "HTTP/3", stays="HTTP/3"),
]


def _trio_only_section() -> str:
    """The docs' "What stays with ``uamp serve``" section, lower case, one space between words."""
    text = DOC.read_text()
    start = text.index("## What stays with `uamp serve`")
    end = text.find("\n## ", start + 1)
    return " ".join(text[start : end if end != -1 else None].lower().split())


def _below_agent(pattern: str) -> str:
    """A route pattern as the tables name it: below ``/agents/{agent}``."""
    return pattern.removeprefix("/agents/{agent}")


def _concrete(pattern: str) -> str:
    """A path the pattern matches (``{agent}`` a hosted agent's name)."""
    return re.sub(
        r"\{(\w+)(?::[^}]*)?\}",
        lambda m: "demo" if m.group(1) == "agent" else m.group(1) + "1",
        pattern,
    )


def _trio_routes() -> list[str]:
    """Every route of a ``uamp serve`` app, as ``"METHOD pattern"``."""
    from uamp_trio import DemoAgent
    from uamp_trio.app import create_app

    app = create_app([DemoAgent()], relay=True, metrics=True)
    routes = [
        f"{method} {route.pattern}" for route in app.router.routes for method in route.methods
    ]
    return routes + [f"WS {route.pattern}" for route in app.router.websocket_routes]


def _asgi_serves(route: str) -> bool:
    from uamp_trio import DemoAgent

    host = uamp_asgi.app([DemoAgent()], config=uamp_asgi.Config(metrics=True)).host
    method, _, pattern = route.partition(" ")
    _, sub = host.split(_concrete(pattern))
    if method == "WS":
        return host.match_websocket(sub) is not None
    for headers in (None, _HEADERS):
        try:
            host.match(method, sub, headers)
            return True
        except HTTPError:
            continue
    return False


def _key(route: str) -> str:
    method, _, pattern = route.partition(" ")
    return f"{method} {_below_agent(pattern)}"


def test_every_route_of_uamp_serve_is_served_or_said_to_stay() -> None:
    routes = _trio_routes()
    missing = {_key(r) for r in routes if not _asgi_serves(r)}
    unlisted = sorted(missing - TRIO_ONLY_ROUTES.keys())
    assert not unlisted, f"uamp_asgi does not serve these; serve them or list them: {unlisted}"
    # gRPC routes exist only with the grpc extra; every other entry must be a route.
    grpc = {k for k in TRIO_ONLY_ROUTES if "/lf.a2a.v1." in k or "/uamp.v1.Agent/" in k}
    present = {_key(r) for r in routes} | grpc
    gone = sorted(TRIO_ONLY_ROUTES.keys() - present)
    assert not gone, f"uamp serve has no such routes; take them off the Trio-only list: {gone}"
    served = sorted((TRIO_ONLY_ROUTES.keys() & {_key(r) for r in routes}) - missing)
    assert not served, f"uamp_asgi serves these now; take them off the Trio-only list: {served}"


@pytest.mark.parametrize(
    "words",
    sorted(set(TRIO_ONLY_ROUTES.values()) | {f.stays for f in FEATURES if f.stays}),
)
def test_what_stays_with_uamp_serve_is_named_in_the_docs(words: str) -> None:
    assert words.lower() in _trio_only_section()


@pytest.mark.parametrize("feature", [f for f in FEATURES if f.proven], ids=lambda f: f.what)
def test_each_feature_said_to_be_served_has_its_test(feature: Feature) -> None:
    path, _, name = (feature.proven or "").partition("::")
    tree = ast.parse((ROOT / path).read_text())
    kinds = (ast.AsyncFunctionDef, ast.FunctionDef)
    tests = {node.name for node in tree.body if isinstance(node, kinds)}
    assert name in tests, f"{feature.transport}: {feature.what}: no test {feature.proven}"


def test_every_feature_is_either_served_or_said_to_stay() -> None:
    for feature in FEATURES:
        assert (feature.proven is None) != (feature.stays is None), feature
