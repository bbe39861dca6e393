"""``examples/ai-sdk-chat``, as a reader runs it, against a real ``uamp serve``.

The example is installed with ``npm ci`` from its own lock file (into the
tests' cache folder) and run with Node: the Vercel AI SDK's ``Chat`` and
``DefaultChatTransport`` chat with the demo agent, whose ``add`` tool runs on
the server and whose ``get_weather`` call the example runs itself.
"""

from __future__ import annotations

import shutil
import subprocess

from tests._support.cli import ROOT, uamp_serve
from tests._support.npm import install_client


def test_the_example_chats_with_server_and_client_tools() -> None:
    example = install_client(ROOT / "examples" / "ai-sdk-chat", "ai-sdk-example", script="chat.mjs")
    node = shutil.which("node")
    assert node is not None, "node is needed: install Node 20"
    with uamp_serve() as url:
        done = subprocess.run(
            [node, "chat.mjs", f"{url}/agents/demo/ai-sdk"],
            cwd=example,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.splitlines() == [
        "user: what is 2+3?",
        'assistant: [add({"a":2,"b":3}) -> "5"] 2 + 3 = 5',
        "user: get weather in Paris",
        'assistant: [get_weather({"city":"get weather in Paris"}) -> '
        '"sunny, 21 C in get weather in Paris"] '
        "Tool get_weather returned: sunny, 21 C in get weather in Paris",
    ]
