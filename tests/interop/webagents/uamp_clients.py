"""webagents 0.3.9's two UAMP clients against a uamp server, run inside the throwaway virtualenv.

``python uamp_clients.py BASE_URL``: the LLM-proxy skill (the whole
conversation on ``response.create`` as ``response.messages``, model settings
in ``session.create``'s ``session.extensions``) dials
``BASE_URL/agents/demo/uamp``, and the agent-to-agent delegation skill (NLI:
``input.text`` then ``response.create``) dials the same agent by name. Prints
one JSON object with what each got. The skills are used as they ship: nothing
of them is patched or copied.
"""

import asyncio
import json
import sys

from webagents.agents.skills.core.llm.proxy.skill import LLMProxySkill
from webagents.agents.skills.robutler.nli.skill import NLISkill


async def main(base: str) -> None:
    ws_base = base.replace("http://", "ws://", 1)
    proxy = LLMProxySkill(
        {"proxy_url": f"{ws_base}/agents/demo/uamp", "model": "demo", "temperature": 0.1}
    )
    conversation = [
        {"role": "system", "content": "You are the demo agent."},
        {"role": "user", "content": "what is 2+3?"},
        {"role": "assistant", "content": "2 + 3 = 5"},
        {"role": "user", "content": "please repeat after me: bananas"},
    ]
    whole = await proxy.chat_completion(conversation)
    chunks = []
    async for chunk in proxy.chat_completion_stream([{"role": "user", "content": "what is 2+3?"}]):
        for choice in chunk.get("choices", []):
            text = (choice.get("delta") or {}).get("content")
            if text:
                chunks.append(text)
    nli = NLISkill({"agent_base_url": base, "transport": "uamp"})
    delegated = await nli._send_via_uamp("demo", "delegated hello", {}, None, 20.0)
    print(
        json.dumps(
            {
                "proxy": whole["choices"][0]["message"]["content"],
                "proxy_stream": "".join(chunks),
                "delegate": delegated,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
