"""The OpenAI Realtime API over an ASGI WebSocket: ``WS .../realtime``, as ``uamp serve``.

The OpenAI SDK's ``client.realtime.connect(model=...)`` appends
``/realtime?model=...`` to its WebSocket base URL: a client whose
``base_url`` is ``http://host:port/agents/demo`` lands on that agent;
``/v1/realtime`` at the root picks the agent by ``model`` (or the only one).

Each accepted socket is served by
:class:`~uamp_stores.realtime.RealtimeConnection`, the connection ``uamp
serve`` runs too (responses one at a time under the busy policy, payment
holds and mid-response top-ups, signing, calls; its module says how). This
module passes it what is the ASGI app's: each response runs on
:class:`~uamp_asgi.turns.Turn`, the conversations' gate is the host's
(``Config.on_busy``), and the agent's terms are the config's payment policy
and signer, a response held for payment waiting ``Config.payment_wait``.
"""

from __future__ import annotations

from urllib.parse import parse_qs

import attrs

from uamp_proto.adapters import realtime as rt
from uamp_proto.ids import short_random_ids
from uamp_proto.payment import Charge, PaymentRequiredError, balance_of, pricing_of, refusal
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder
from uamp_proto.signing import ResponseSigner
from uamp_stores.realtime import RealtimeConnection

from ..app import Host
from ..http import HTTPError
from ..websocket import Closed, WebSocket

__all__ = ["mount"]


@attrs.frozen
class _Terms:
    """``agent`` on the app's terms: its payment policy and signer (a Realtime ``Terms``)."""

    host: Host
    agent: Responder

    @property
    def signer(self) -> ResponseSigner | None:
        return self.host.config.response_signer

    async def refusal(self, token: str | None) -> PaymentRequiredError | None:
        policy = self.host.config.payment_policy
        return await refusal(policy, self.agent.name, token, pricing_of(self.agent))

    async def balance(self, token: str | None) -> str | None:
        return await balance_of(self.host.config.payment_policy, token)

    async def open_charge(
        self, token: str | None, response_id: str, caller: Principal
    ) -> Charge | None:
        return await self.host.open_charge(self.agent, token, response_id, caller)


def mount(host: Host) -> None:
    """Serve the Realtime API at ``.../realtime`` and ``/v1/realtime``."""

    async def serve(ws: WebSocket) -> None:
        query = parse_qs(ws.scope.get("query_string", b"").decode("latin-1"))
        model = (query.get("model") or [None])[0]
        try:
            agent = host.resolve_agent(ws.path_params, model=model)
        except HTTPError:
            await ws.close(1008)
            return
        offered = [
            p.strip() for p in ws.headers.get("sec-websocket-protocol", "").split(",") if p.strip()
        ]
        session, subprotocol = rt.open_session(
            agent.capabilities(),
            model=model,
            openai_beta=ws.headers.get("openai-beta"),
            subprotocols=offered,
            expires_at=ws.principal.expires_at,
            ids=short_random_ids,
        )
        await ws.accept(subprotocol)
        try:
            connection = RealtimeConnection(
                ws,
                _Terms(host, agent),
                session,
                ws.principal,
                runner=host.turns.turn,
                closed=(Closed,),
                conversations=host.conversations,
                payment_wait=host.config.payment_wait,
            )
            await connection.run()
        finally:
            await ws.close()

    host.websocket("/realtime", serve)
    host.websocket("/v1/realtime", serve)
