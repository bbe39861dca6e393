"""``uamp serve`` as a real subprocess: starts, prints URLs, answers, stops on signals."""

from __future__ import annotations

import gc
import re
import signal
import subprocess
import time

import httpx
import pytest

from tests._support.cli import STARTUP, spawn_serve, uamp
from uamp_trio.cli import FULL_COLLECTION_EVERY, load_agent, settle_garbage_collector


def start(*args: str) -> tuple[subprocess.Popen[str], list[str]]:
    proc = spawn_serve(*args, stderr=subprocess.PIPE)
    lines: list[str] = []
    deadline = time.monotonic() + STARTUP
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if line.startswith("single agent") or line.startswith("Ctrl-C"):
            break
        if len([x for x in lines if "Models:" in x]) >= 2:  # two agents listed
            break
    return proc, lines


def stop(proc: subprocess.Popen[str], signum: int) -> int:
    proc.send_signal(signum)
    try:
        return proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_serve_prints_urls_answers_and_stops_on_signal(signum: int) -> None:
    proc, lines = start()
    try:
        text = "\n".join(lines)
        m = re.search(
            r"Chat Completions: (http://127\.0\.0\.1:(\d+)/agents/demo/chat/completions)", text
        )
        assert m, text
        assert f"Capabilities: http://127.0.0.1:{m.group(2)}/agents/demo/capabilities" in text
        r = httpx.post(
            m.group(1), json={"messages": [{"role": "user", "content": "cli"}]}, timeout=10
        )
        assert r.status_code == 200
        assert r.json()["choices"][0]["message"]["content"] == "You said: cli"
    finally:
        code = stop(proc, signum)
    assert code == 0
    assert proc.stdout is not None
    assert "shutting down" in proc.stdout.read()


def test_serve_hosts_several_agents_from_module_specs() -> None:
    proc, lines = start(
        "--agent", "tests.trio.test_cli:make_helper", "--agent", "uamp_trio.demo:DemoAgent"
    )
    try:
        text = "\n".join(lines)
        m = re.search(
            r"http://127\.0\.0\.1:(\d+)/agents/alice\.my-bot\.helper/chat/completions", text
        )
        assert m, text
        base = f"http://127.0.0.1:{m.group(1)}"
        r = httpx.get(f"{base}/v1/models", timeout=10)
        assert sorted(d["id"] for d in r.json()["data"]) == ["alice.my-bot.helper", "demo"]
    finally:
        assert stop(proc, signal.SIGTERM) == 0


def test_serve_rejects_a_bad_agent_spec() -> None:
    proc = uamp("serve", "--agent", "json:JSONDecoder", timeout=30)
    assert proc.returncode == 2
    assert "JSONDecoder is not an agent" in proc.stderr


def test_serve_a2a_quota_flags() -> None:
    refused = uamp("serve", "--a2a-max-tasks-per-principal", "0", timeout=30)
    assert refused.returncode == 2
    assert "max_per_principal must be at least 1" in refused.stderr
    proc, lines = start("--a2a-max-tasks", "10", "--a2a-max-tasks-per-principal", "1")
    try:
        m = re.search(r"http://127\.0\.0\.1:(\d+)", "\n".join(lines))
        assert m, lines
        url = f"http://127.0.0.1:{m.group(1)}/a2a"

        def send(text: str) -> dict[str, object]:
            message = {"role": "user", "parts": [{"kind": "text", "text": text}], "messageId": text}
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "message/send",
                "params": {"message": message, "configuration": {"blocking": False}},
            }
            reply: dict[str, object] = httpx.post(url, json=body, timeout=10).json()
            return reply

        # The demo agent finishes at once, so its one slot is always freed for the next.
        assert "result" in send("one") and "result" in send("two")
    finally:
        assert stop(proc, signal.SIGTERM) == 0


def test_load_agent_specs() -> None:
    agent = load_agent("tests.trio.test_cli:make_helper")
    assert agent.name == "alice.my-bot.helper"
    with pytest.raises(ValueError, match="module:attribute"):
        load_agent("no-colon")
    with pytest.raises(ValueError, match="cannot import"):
        load_agent("no_such_module_xyz:thing")
    with pytest.raises(ValueError, match="calling dumps\\(\\) failed"):
        load_agent("json:dumps")


def make_helper():  # type: ignore[no-untyped-def]
    """A zero-argument factory, loaded by the tests above."""
    from uamp_trio.demo import DemoAgent

    return DemoAgent("alice.my-bot.helper")


def test_serve_mounts_the_uamp_websocket_too() -> None:
    proc, lines = start()
    try:
        text = "\n".join(lines)
        assert re.search(r"UAMP WebSocket: ws://127\.0\.0\.1:\d+/agents/demo/uamp", text), text
    finally:
        assert stop(proc, signal.SIGINT) == 0


def test_serve_settles_the_garbage_collector() -> None:
    """Start-up objects are frozen and full collections are considered ten times less often."""
    before = gc.get_threshold()
    assert before[2] < FULL_COLLECTION_EVERY
    try:
        settle_garbage_collector()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (before[0], before[1], FULL_COLLECTION_EVERY)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
