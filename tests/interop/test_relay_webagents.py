"""webagents 0.3.9's Portal Connect daemon against ``uamp serve --relay``, unmodified.

webagents is installed from the package index into a throwaway virtualenv
in the tests' cache folder, ``tests/_support/cache.py`` (never a dependency
of this project; created on the first run, reused after). Its agent's model
is the OpenAI skill pointed at a uamp server's own Completions endpoint (the
offline demo agent), so nothing leaves the machine. The OpenAI SDK pointed
at the relay must get the webagents agent's answer.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests._support.cli import ENV, ROOT, uamp_serve
from tests.interop.test_relay import stop, wait_online

SCRIPT = Path(__file__).parent / "webagents" / "portal_daemon.py"


@pytest.fixture(scope="module")
def relay_with_webagents(webagents_python: Path) -> Iterator[str]:
    with uamp_serve() as model, uamp_serve("--relay") as relay:
        daemon = subprocess.Popen(
            [str(webagents_python), str(SCRIPT), f"{model}/agents/demo", relay, "webbot"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            env={**ENV, "PYTHONPATH": ""},
        )
        try:
            wait_online(relay, {"webbot"})
            yield relay
        finally:
            log = stop(daemon)
            print(log[-4000:], file=sys.stderr)


def test_the_openai_sdk_gets_the_webagents_agents_answer(relay_with_webagents: str) -> None:
    client = openai.OpenAI(
        base_url=f"{relay_with_webagents}/agents/webbot", api_key="x", max_retries=0, timeout=30
    )
    reply = client.chat.completions.create(
        model="webbot", messages=[{"role": "user", "content": "hello from the sdk"}]
    )
    assert reply.choices[0].message.content == "You said: hello from the sdk"
    stream = client.chat.completions.create(
        model="webbot",
        messages=[
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "You said: first"},
            {"role": "user", "content": "second turn"},
        ],
        stream=True,
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "You said: second turn"
