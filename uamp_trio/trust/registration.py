"""Who may register an agent on a relay: a credential bound to that agent (docs/relay.md).

A daemon registers agent ``X`` on a relay with authentication only when the
principal its credential proved is bound to ``X``:

* a JWT whose verified claims name the agent: ``agent_id`` or ``agent_name``
  equal to ``X`` (per-agent keys carry both);
* an API key listed as ``agent:X:key`` (principal ``agent:X``).

Any other principal -- a user's token, an anonymous caller -- is a client
and never registers anything.
"""

from __future__ import annotations

from uamp_proto.principal import Principal

from .auth import AGENT_PREFIX

__all__ = ["bound_to"]

#: JWT claims that bind a token to one agent.
AGENT_CLAIMS = ("agent_id", "agent_name")


def bound_to(principal: Principal, agent: str) -> bool:
    """Whether ``principal``'s credential is bound to agent ``agent``."""
    if principal.scheme == "api_key":
        return principal.id == f"{AGENT_PREFIX}:{agent}"
    if principal.scheme == "jwt":
        return any(principal.claims.get(claim) == agent for claim in AGENT_CLAIMS)
    return False
