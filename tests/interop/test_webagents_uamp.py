"""webagents 0.3.9's UAMP clients against ``uamp serve``, unmodified.

Robutler's SDK speaks UAMP over ``/agents/NAME/uamp`` in two places: its
LLM-proxy skill sends the whole conversation on ``response.create`` as
``response.messages`` (model settings in ``session.extensions``), and its
agent-to-agent delegation skill sends ``input.text`` then ``response.create``.
Both run in the throwaway virtualenv of the relay's webagents test (never a
dependency of this project) against the demo agent, which must answer the
last user message of the conversation each sent.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests._support.cli import ENV, ROOT, uamp_serve

SCRIPT = Path(__file__).parent / "webagents" / "uamp_clients.py"


def test_the_llm_proxy_and_delegation_skills_get_the_demo_agents_answers(
    webagents_python: Path,
) -> None:
    with uamp_serve() as base:
        ran = subprocess.run(
            [str(webagents_python), str(SCRIPT), base],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            env={**ENV, "PYTHONPATH": ""},
        )
    assert ran.returncode == 0, ran.stderr[-4000:]
    got = json.loads(ran.stdout.strip().splitlines()[-1])
    assert got == {
        # The last user message of a four-message conversation, not an empty one.
        "proxy": "You said: please repeat after me: bananas",
        "proxy_stream": "2 + 3 = 5",
        "delegate": "You said: delegated hello",
    }
