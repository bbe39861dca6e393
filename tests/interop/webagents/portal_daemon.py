"""A webagents 0.3.9 agent behind its Portal Connect skill, run inside the throwaway virtualenv.

``python portal_daemon.py MODEL_URL RELAY_URL NAME``: the agent's model is
the OpenAI skill pointed at ``MODEL_URL`` (a uamp server's own Completions
endpoint, so no network is needed), and Portal Connect dials ``RELAY_URL`` and
registers the agent as ``NAME``. Runs until killed. The skill is used as it
ships: nothing of it is patched or copied.
"""

import asyncio
import logging
import sys

from webagents.agents.core.base_agent import BaseAgent
from webagents.agents.skills.core.llm.openai.skill import OpenAISkill
from webagents.agents.skills.robutler.portal_connect import PortalConnectSkill


async def main(model_url: str, relay_url: str, name: str) -> None:
    portal = PortalConnectSkill(
        {"portal_ws_url": relay_url, "agents": [{"name": name, "token": "local-daemon"}]}
    )
    model = OpenAISkill({"model": "demo", "api_key": "unused", "base_url": model_url})
    agent = BaseAgent(name=name, skills={"primary_llm": model, "portal": portal})
    portal.set_agent_resolver(lambda wanted: agent if wanted == name else None)
    await agent._ensure_skills_initialized()
    print("webagents daemon started", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stdout)
    asyncio.run(main(*sys.argv[1:4]))
