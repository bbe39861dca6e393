"""A model provider that fails is visible to the operator (issue 32, item 4): one warning
per request naming the agent, the provider, the model and the error, never the key; and
the access line names the agent on a root alias -- a real ``uamp serve`` subprocess whose
agent's provider points at a closed port."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import httpx

from tests._support.cli import Served

SECRET = "sk-test-0123456789abcdef"

AGENT = """
from uamp_agents import agent
from uamp_agents.providers import openai

# The key and the base URL come from the environment, as with the openai SDK.
broken = agent(model=openai("gpt-test", max_retries=0), name="broken")
"""


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_failing_provider_is_logged_once_per_request_without_the_key(tmp_path: Path) -> None:
    (tmp_path / "brokenagent.py").write_text(AGENT)
    env = {"OPENAI_API_KEY": SECRET, "OPENAI_BASE_URL": f"http://127.0.0.1:{_closed_port()}/v1"}
    command = [sys.executable, "-m", "uamp_trio", "serve", "--port", "0"]
    with Served(
        [*command, "--agent", "brokenagent:broken", "--log-level", "info"], cwd=tmp_path, env=env
    ) as srv:
        base = srv.url()
        for _ in range(2):
            reply = httpx.post(
                f"{base}/v1/chat/completions",
                json={"model": "broken", "messages": [{"role": "user", "content": "hi"}]},
                timeout=30,
            )
            assert reply.status_code == 500, reply.text
            assert reply.json()["error"]["code"] == "provider_error"
        srv.wait_for(r"POST /v1/chat/completions.* 500 .*", after=0)
    output = "\n".join(srv.lines)
    warnings = [line for line in srv.lines if "model provider" in line]
    assert len(warnings) == 2, output  # one per request
    for line in warnings:
        assert "WARNING" in line.upper(), line
        assert "agent broken: model provider openai failed (model gpt-test): ConnectError" in line
    assert SECRET not in output and SECRET[3:] not in output
    access = [line for line in srv.lines if '"POST /v1/chat/completions' in line]
    assert len(access) == 2, output
    assert all(" agent=broken " in line for line in access), access


def test_redact_hides_what_looks_like_a_key() -> None:
    from uamp_agents.bridge import redact

    text = (
        f"401 Incorrect API key provided: {SECRET}; Authorization: Bearer abc.def-ghi "
        "url https://x/models/g:generate?key=AIzaSyA0123456789&alt=sse"
    )
    shown = redact(text)
    assert SECRET not in shown and "abc.def-ghi" not in shown and "AIzaSyA0123456789" not in shown
    assert shown.startswith("401 Incorrect API key provided: [redacted]")
    assert redact("connection refused") == "connection refused"
