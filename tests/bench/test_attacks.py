"""The short attack suite (bench/attacks.py) against a real ``uamp serve``, asserting its bounds.

Its ``asgi_`` rows attack ``uamp_asgi`` under uvicorn (``bench/attack_asgi.py``).
One server process of each kind for all scenarios (its sampled peak RSS per scenario);
``bench/attacks.py --long`` runs the issue's counts on a fresh server each.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Scenarios where agent runs are legitimate work: the stalled reader's own
#: response, the pipelined second requests h11 also reads in the corpus, and
#: the one copy of the replayed envelope that is taken, and the task push configs
#: are piled on.
WORK = {
    "ws_stalled_reader",
    "asgi_ws_stalled_reader",
    "smuggling",
    "concurrent_replay",
    "push_config_pin",
    "deep_json_multi_session",  # the live session's one response
    "busy_queue_flood",  # the held prompt and the eight queued ones, in turn
    "interrupt_flood",  # every run is the agent's: 32 park, the rest are refused the ask
    "push_slow_webhook",  # the flooding task itself
    "acp_history_pin",  # every prompt
    "acp_load_dropped",  # the three prompts that fill the session, and the one after
    "uamp_input_pin",  # the one response on the input kept
    "asgi_uamp_input_pin",
    "uamp_history_pin",  # every turn
    "asgi_uamp_history_pin",
    "uamp_history_spread",  # every turn, and the new client's
    "asgi_uamp_history_spread",
    "uamp_endless_output",  # each endless response, until its bound, and the last turn
    "asgi_uamp_endless_output",
    "uamp_record_history_pin",  # every turn, and each resumed session's
    "asgi_uamp_record_history_pin",
    "realtime_busy_flood",  # the held responses and the queued ones, in turn
    "asgi_realtime_busy_flood",
    "asgi_push_config_pin",
    "asgi_deep_json_multi_session",
    "asgi_ai_sdk_answer_pin",  # the eight answers left running, unread
    "ai_sdk_answer_pin",
    "background_response_pin",  # the sixteen responses left running
    "asgi_background_response_pin",
    "a2a_task_flood",  # the 32 tasks kept, running
    "asgi_a2a_task_flood",
}


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, object]]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "attacks.py"), "--json"],
        capture_output=True,
        timeout=420,
        cwd=ROOT,
        check=False,
    )
    lines = [json.loads(line) for line in done.stdout.decode().splitlines() if line.strip()]
    assert lines, done.stderr.decode()[-3000:]
    return {r["name"]: r for r in lines}


SCENARIOS = [
    "rapid_reset",
    "never_ending_streams",
    "continuation_flood",
    "settings_flood",
    "ping_flood_h2",
    "ws_ping_flood",
    "ws_invalid_utf8",
    "ws_oversized",
    "ws_stalled_reader",
    "smuggling",
    "lowercase_methods",
    "head_limit",
    "stalled_bodies",
    "idle_flood",
    "slowloris",
    "json_bomb",
    "role_object",
    "big_integers",
    "inform_memory_pin",
    "mcp_session_flood",
    "acp_session_pin",
    "push_config_pin",
    "sse_session_pin",
    "busy_queue_flood",
    "acp_history_pin",
    "acp_load_dropped",
    "interrupt_flood",
    "concurrent_replay",
    "relay_token_spend",
    "chat_redos_rule",
    "chat_nested_groups_rule",
    "expired_socket_room_actions",
    "deep_json_multi_session",
    "chat_memory_pin",
    "push_slow_webhook",
    "oversized_bodies",
    "realtime_busy_flood",
    "background_response_pin",
    "a2a_task_flood",
    "ai_sdk_answer_pin",
    "uamp_input_pin",
    "uamp_history_pin",
    "uamp_history_spread",
    "uamp_record_history_pin",
    "uamp_endless_output",
    # uamp_asgi under uvicorn (bench/attack_asgi.py)
    "asgi_json_bomb",
    "asgi_oversized_bodies",
    "asgi_sse_session_pin",
    "asgi_uamp_session_flood",
    "asgi_deep_json_multi_session",
    "asgi_mcp_session_flood",
    "asgi_push_config_pin",
    "asgi_realtime_busy_flood",
    "asgi_ai_sdk_answer_pin",
    "asgi_background_response_pin",
    "asgi_a2a_task_flood",
    "asgi_uamp_input_pin",
    "asgi_uamp_history_pin",
    "asgi_ws_stalled_reader",
    "asgi_uamp_history_spread",
    "asgi_uamp_record_history_pin",
    "asgi_uamp_endless_output",
]


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_stays_within_its_bounds(results: dict[str, dict[str, object]], name: str) -> None:
    result = results[name]
    assert result["peak_rss_mb"] < 200, result  # type: ignore[operator]
    assert result["health_probes"] > 0 and result["health_failures"] == 0, result  # type: ignore[operator]
    allowed = result["agent_allowed"]
    assert (allowed > 0) == (name in WORK), result  # type: ignore[operator]
    assert result["agent_invoked"] == allowed, result
    assert result["tracebacks"] == 0, result["first_traceback"]
    assert result["ok"] is True, result  # the scenario's own answer check (GOAWAY, 1007...)
