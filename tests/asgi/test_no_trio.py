"""uamp_asgi runs on any ASGI server's loop: it never imports Trio (nor the Trio binding)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "uamp_asgi"
#: The stores and the A2A push sender the app shares with ``uamp serve``.
STORES = PACKAGE.parent / "uamp_stores"
#: ``uamp_stores.background`` imports Trio only when Trio runs (to start a system task).
LOOP_AWARE = {"background.py"}
#: Trio, and what only runs on it.
FORBIDDEN = {"trio", "trio_websocket", "uamp_trio", "uamp_agents", "h11", "h2", "wsproto"}


def _modules() -> list[Path]:
    shared = [p for p in STORES.rglob("*.py") if p.name not in LOOP_AWARE]
    return sorted(PACKAGE.rglob("*.py")) + sorted(shared)


def forbidden_imports(source: str) -> list[str]:
    """The modules of :data:`FORBIDDEN` that ``source`` imports, anywhere in it."""
    bad: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        bad.extend(n for n in names if n.split(".")[0] in FORBIDDEN)
    return bad


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_module_imports_no_trio(path: Path) -> None:
    assert forbidden_imports(path.read_text()) == []


def test_the_check_catches_a_trio_import() -> None:
    assert forbidden_imports("def f():\n    import trio.lowlevel\n") == ["trio.lowlevel"]
    assert forbidden_imports("from uamp_trio.engines import http\n") == ["uamp_trio.engines"]


def test_importing_the_app_and_its_transports_loads_no_trio() -> None:
    code = (
        "import sys, uamp_asgi, uamp_asgi.responders;"
        "from uamp_asgi.responders import function_agent;"
        "from uamp_stores.a2a_push import PushSender;"
        "async def a(turn):\n    yield 'x'\n"
        "uamp_asgi.app([function_agent(a)]);"
        "uamp_asgi.app([function_agent(a)], config=uamp_asgi.Config("
        "a2a_push=PushSender(allow=['127.0.0.1/32'])));"
        "bad = {'trio', 'uamp_trio', 'uamp_agents'} & set(sys.modules);"
        "print(sorted(bad)); raise SystemExit(1 if bad else 0)"
    )
    code = code.replace(";async", "\nasync").replace("'x'\nuamp", "'x'\nuamp")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


#: Serves an app under uvicorn (asyncio) in an install without Trio, sends an A2A
#: task whose config names a receiver on 127.0.0.1, waits for the webhook to get
#: the completed task, then prints what of uamp's Trio side was loaded. (Trio
#: itself is made unimportable: where it is installed httpcore, the push
#: client's HTTP library, imports it to tell which loop runs it.)
PUSHING = """
import sys
sys.modules["trio"] = None  # not installed: importing it fails
import asyncio, json, socket
import httpx, uvicorn
import uamp_asgi
from uamp_asgi.responders import function_agent
from uamp_stores.a2a_push import PushSender

async def echo(turn):
    yield "hi"

got = []

async def hook(reader, writer):
    head = await reader.readuntil(b"\\r\\n\\r\\n")
    length = [l for l in head.split(b"\\r\\n") if l.lower().startswith(b"content-length:")]
    got.append(json.loads(await reader.readexactly(int(length[0].split(b":")[1]))))
    writer.write(b"HTTP/1.1 200 OK\\r\\ncontent-length: 0\\r\\nconnection: close\\r\\n\\r\\n")
    await writer.drain()
    writer.close()

async def main():
    receiver = await asyncio.start_server(hook, "127.0.0.1", 0)
    target = f"http://127.0.0.1:{receiver.sockets[0].getsockname()[1]}/hook"
    config = uamp_asgi.Config(a2a_push=PushSender(allow=["127.0.0.1/32"]))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    server = uvicorn.Server(uvicorn.Config(uamp_asgi.app([function_agent(echo)], config=config),
                                           log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    params = {"message": {"role": "ROLE_USER", "parts": [{"text": "x"}], "messageId": "m"},
              "configuration": {"taskPushNotificationConfig": {"url": target}}}
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/agents/echo/a2a/message:send"
    async with httpx.AsyncClient() as http:
        (await http.post(url, json=params)).raise_for_status()
    for _ in range(500):
        states = [b["statusUpdate"]["status"]["state"] for b in got if "statusUpdate" in b]
        if "TASK_STATE_COMPLETED" in states:
            break
        await asyncio.sleep(0.02)
    server.should_exit = True
    await serving
    print("states", states)

asyncio.run(main())
bad = {"uamp_trio", "uamp_agents"} & set(sys.modules)
print("loaded", sorted(bad), "httpcore" in sys.modules)
raise SystemExit(1 if bad else 0)
"""


def test_an_app_pushing_to_a_webhook_under_uvicorn_loads_no_trio() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PUSHING], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "TASK_STATE_COMPLETED" in result.stdout
    assert "loaded [] True" in result.stdout  # the webhook was called with httpcore
