"""``uamp`` as operators use it: version, one-line errors, imports from the current
directory, the access log, the banner and ``--reload`` -- each through the real
``uamp`` script in a subprocess on 127.0.0.1."""

from __future__ import annotations

import importlib.metadata
import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests._support.cli import ENV, ROOT, STARTUP, UAMP_SCRIPT, Served

VERSION = importlib.metadata.version("uamp")


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [UAMP_SCRIPT, *args], capture_output=True, text=True, cwd=cwd, env=ENV, timeout=60
    )


def serve(*args: str, cwd: Path = ROOT) -> Served:
    return Served([UAMP_SCRIPT, "serve", "--port", "0", *args], cwd=cwd)


# --- version ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [[UAMP_SCRIPT, "--version"], [sys.executable, "-m", "uamp", "--version"]],
    ids=["script", "python -m uamp"],
)
def test_version_is_the_distribution_version(command: list[str], tmp_path: Path) -> None:
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=ENV)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"uamp {VERSION}"


def test_python_dash_m_uamp_serves(tmp_path: Path) -> None:
    with Served([sys.executable, "-m", "uamp", "serve", "--port", "0"], cwd=tmp_path) as srv:
        r = httpx.get(srv.url() + "/v1/models", timeout=10)
        assert [m["id"] for m in r.json()["data"]] == ["demo"]


# --- one-line errors ------------------------------------------------------------------


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


BROKEN_MODULE = "raise RuntimeError('agent config missing')\n"

ERRORS = [
    # (id, args, exit code, what the one line must say)
    ("bad log level", ["--log-level", "loud"], 2, "invalid choice: 'loud'"),
    ("bad port value", ["--port", "eighty"], 2, "'eighty' is not a port number"),
    ("bad log format", ["--log-format", "xml"], 2, "invalid choice: 'xml'"),
    ("unknown flag", ["--colour"], 2, "unrecognized arguments: --colour"),
    ("unknown module", ["--agent", "no_such_module:agent"], 2, "cannot import 'no_such_module'"),
    ("unknown attribute", ["--agent", "uamp_trio.demo:Nope"], 2, "has no 'Nope'"),
    ("malformed agent", ["--agent", "just_a_module"], 2, "expected 'module:attribute'"),
    ("missing cert", ["--certfile", "nope.pem", "--keyfile", "nope.pem"], 2, "No such file"),
    ("garbage cert", ["--certfile", "junk.pem", "--keyfile", "junk.pem"], 2, "cannot load"),
    ("cert without key", ["--certfile", "junk.pem"], 2, "go together"),
]


@pytest.mark.parametrize(
    ("args", "code", "says"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
def test_operator_mistakes_are_one_line(
    args: list[str], code: int, says: str, tmp_path: Path
) -> None:
    (tmp_path / "broken.py").write_text(BROKEN_MODULE)
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    done = run("serve", "--port", "0", *args, cwd=tmp_path)
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert re.match(r"uamp( serve)?: ", lines[0])
    assert says in lines[0]
    assert "Traceback" not in done.stderr + done.stdout


def test_port_in_use_is_one_line_and_status_1(busy_port: int) -> None:
    done = run("serve", "--port", str(busy_port))
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"uamp serve: cannot listen on 127.0.0.1:{busy_port}: Address already in use"
    )


# --- --agent from the current directory -------------------------------------------------

AGENT_MODULE = """
from uamp_trio.demo import DemoAgent

agent = DemoAgent({name!r})
"""


def test_agent_imports_from_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "mymod.py").write_text(AGENT_MODULE.format(name="mine"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = Served(
        [UAMP_SCRIPT, "serve", "--port", "0", "--agent", "mymod:agent"], cwd=tmp_path, env=env
    )
    with proc:
        r = httpx.get(proc.url() + "/v1/models", timeout=10)
        assert [m["id"] for m in r.json()["data"]] == ["mine"]


# --- access log ---------------------------------------------------------------------------


def _traffic(base: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": "Bearer sk-SECRET-HEADER"}
    r = httpx.post(
        f"{base}/agents/demo/chat/completions?token=SECRET-QUERY",
        json=body,
        headers=headers,
        timeout=10,
    )
    assert r.status_code == 200
    assert httpx.get(f"{base}/no/such/route", timeout=10).status_code == 404


ACCESS_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (127\.0\.0\.1:\d+) "
    r'"(\w+) (\S+) (HTTP/[\d.]+|WebSocket)" (\d{3}) ([\d.]+)ms agent=(\S+) transport=(\S+)$'
)


def test_access_log_has_one_line_per_request_and_no_secret() -> None:
    with serve() as srv:
        base = srv.url()
        start = len(srv.lines)
        _traffic(base)
        srv.wait_for(r'"GET /no/such/route HTTP/1\.1" 404', after=start)
    access = [m for line in srv.lines if (m := ACCESS_LINE.match(line))]
    assert [(m[3], m[4], m[6], m[8], m[9]) for m in access] == [
        ("POST", "/agents/demo/chat/completions", "200", "demo", "completions"),
        ("GET", "/no/such/route", "404", "-", "-"),
    ]
    assert all(float(m[7]) >= 0 for m in access)
    output = "\n".join(srv.lines)
    assert "SECRET" not in output


def test_access_log_json_lines() -> None:
    with serve("--log-format", "json") as srv:
        base = srv.url()
        start = len(srv.lines)
        _traffic(base)
        srv.wait_for(r'"path": ?"/no/such/route"', after=start)
    records = [json.loads(line) for line in srv.lines if line.startswith("{")]
    access = [r for r in records if r["logger"] == "uamp.access"]
    assert [(r["method"], r["path"], r["status"], r["agent"], r["transport"]) for r in access] == [
        ("POST", "/agents/demo/chat/completions", 200, "demo", "completions"),
        ("GET", "/no/such/route", 404, "-", "-"),
    ]
    for r in access:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["ts"])
        assert r["client"].startswith("127.0.0.1:")
        assert r["duration_ms"] >= 0
    assert "SECRET" not in "\n".join(srv.lines)


def test_a_peer_cannot_forge_a_log_line_or_send_terminal_codes() -> None:
    """A percent-encoded CR LF and an escape sequence in a path stay in one escaped line."""
    forged = "2026-01-01T00:00:00.000Z INFO uamp: forged"
    with serve() as srv:
        port = int(srv.url().rsplit(":", 1)[1])
        start = len(srv.lines)
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(
                b"GET /x%0d%0a"
                + forged.replace(" ", "%20").encode()
                + b"%1b[31m%c2%9b HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
            )
            assert sock.recv(65536).startswith(b"HTTP/1.1 404")
        line = srv.wait_for(r'" 404 ', after=start).string
    assert line.startswith("20")
    assert "\\x0d\\x0a" + forged in line and "\\x1b[31m" in line and "\\x9b" in line
    assert not any(text.startswith(forged) for text in srv.lines)
    assert not any("\x1b" in text or "\r" in text for text in srv.lines)


def test_an_idle_http_sse_stream_does_not_hold_the_shutdown() -> None:
    """SIGINT with a UAMP HTTP+SSE stream open and nothing running: the stream ends at once.

    Before, the stream (which never ends by itself) held the shutdown for its
    whole grace period, and the server then cancelled it.
    """
    srv = serve("--grace", "30")
    try:
        base = srv.url()
        created = httpx.post(
            f"{base}/agents/demo/events",
            json={"type": "session.create", "uamp_version": "1.0"},
            timeout=10,
        )
        assert created.status_code == 200, created.text
        sid = created.headers["x-session-id"]
        with httpx.stream(
            "GET", f"{base}/agents/demo/events/stream?session_id={sid}", timeout=20
        ) as stream:
            chunks = stream.iter_bytes()
            assert b"session.created" in next(chunks)
            srv.proc.send_signal(signal.SIGINT)
            rest = b"".join(chunks)  # the server ends the stream
        assert b"session.created" not in rest
        # It exits by itself (a second SIGINT, as stop() sends, would stop it at once).
        assert srv.proc.wait(timeout=15) == 0
    finally:
        srv.stop()
    output = "\n".join(srv.lines)
    assert "grace period over" not in output, output[-2000:]


def test_no_access_log() -> None:
    with serve("--no-access-log") as srv:
        _traffic(srv.url())
        time.sleep(0.3)
    assert not any(ACCESS_LINE.match(line) for line in srv.lines)


# --- banner -------------------------------------------------------------------------------


def test_banner_lists_every_url_whole_on_a_narrow_terminal() -> None:
    """On a 40-column terminal every URL, WebSocket ones included, is still one whole line."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [UAMP_SCRIPT, "serve", "--port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
        env={**ENV, "COLUMNS": "40", "LINES": "20", "TERM": "xterm-256color"},
    )
    os.close(slave)
    data = b""
    try:
        deadline = time.monotonic() + STARTUP
        while b"Ctrl-C to stop" not in data and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                data += os.read(master, 65536)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
        os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\]8;[^\x1b]*\x1b\\\\", "", data.decode())
    assert "Ctrl-C to stop" in text, text
    base = re.search(r"serving on (http://127\.0\.0\.1:\d+)", text)
    assert base, text
    port = base.group(1).rsplit(":", 1)[1]
    lines = [line.strip() for line in text.splitlines()]
    for label, path in [
        ("Chat Completions", "/agents/demo/chat/completions"),
        ("A2A agent card", "/agents/demo/.well-known/agent-card.json"),
    ]:
        assert f"{label}: http://127.0.0.1:{port}{path}" in lines, text
    for label, path in [
        ("UAMP WebSocket", "/agents/demo/uamp"),
        ("Realtime", "/agents/demo/realtime"),
        ("UAMP WebSocket (any agent)", "/ws"),
    ]:
        assert f"{label}: ws://127.0.0.1:{port}{path}" in lines, text
    assert "…" not in text


# --- reload ---------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_reload_restarts_on_a_code_change(tmp_path: Path) -> None:
    (tmp_path / "mymod.py").write_text(AGENT_MODULE.format(name="before"))
    port = _free_port()
    command = [UAMP_SCRIPT, "serve", "--port", str(port), "--agent", "mymod:agent", "--reload"]
    with Served(command, cwd=tmp_path) as srv:
        base = srv.url()
        r = httpx.get(base + "/v1/models", timeout=10)
        assert [m["id"] for m in r.json()["data"]] == ["before"]
        mark = len(srv.lines)
        time.sleep(0.5)  # let the watcher settle before the change
        (tmp_path / "mymod.py").write_text(AGENT_MODULE.format(name="after"))
        srv.wait_for(r"mymod\.py changed, restarting", after=mark, timeout=30)
        assert srv.url(after=mark) == base
        r = httpx.get(base + "/v1/models", timeout=10)
        assert [m["id"] for m in r.json()["data"]] == ["after"]
    assert srv.proc.returncode == 0
    assert "Traceback" not in "\n".join(srv.lines)


def test_reload_stops_on_sigint_even_when_started_with_sigint_ignored(tmp_path: Path) -> None:
    """A launcher that ignores SIGINT passes that on; the reloader still stops on it."""
    (tmp_path / "mymod.py").write_text(AGENT_MODULE.format(name="before"))
    command = [UAMP_SCRIPT, "serve", "--port", "0", "--agent", "mymod:agent", "--reload"]
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited by the child
    try:
        srv = Served(command, cwd=tmp_path)
    finally:
        signal.signal(signal.SIGINT, ignored)
    with srv:
        srv.url()
    assert srv.proc.returncode == 0


def test_otel_without_the_extra_is_one_line(tmp_path: Path) -> None:
    """``--otel`` where OpenTelemetry does not import: one line naming the extra, exit 2."""
    missing = tmp_path / "shadow" / "opentelemetry"
    missing.mkdir(parents=True)
    (missing / "__init__.py").write_text("raise ImportError('opentelemetry is not installed')\n")
    done = subprocess.run(
        [UAMP_SCRIPT, "serve", "--port", "0", "--otel"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**ENV, "PYTHONPATH": str(missing.parent)},
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "uamp serve: --otel needs the otel extra (pip install 'uamp[otel]'): "
        "opentelemetry is not installed"
    ]
