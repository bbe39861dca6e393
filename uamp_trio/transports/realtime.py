"""The OpenAI Realtime transport: ``WS /agents/{name}/realtime`` (spec 004).

The OpenAI SDK's ``client.realtime.connect(model=...)`` appends
``/realtime?model=...`` to its WebSocket base URL, so a client whose
``base_url`` (or ``websocket_base_url``) is ``http://host:port/agents/demo``
lands here. ``/v1/realtime`` is served at the root too, for a base URL of
``http://host:port/v1`` on a single-agent server.

Each accepted socket is served by
:class:`~uamp_stores.realtime.RealtimeConnection`, the connection both
servers run (responses one at a time under the server's busy policy,
payment holds and mid-response top-ups, signing, calls; its module says
how). This module accepts the upgrade and passes it what is ``uamp serve``'s:
each response runs on :class:`~uamp_trio.hosting.turns.ResponseRunner`, built
on the app's turn options (``app.turns.runner``: the output bound), the
conversations' gate is the app's (``--on-busy``), the agent's terms
(payment policy, signer) are the transport's, and a response is held for
payment for at most :attr:`RealtimeTransport.payment_wait`.

The session object carries ``expires_at`` when the upgrade's credential
expires (the connection ends then); ``voice`` reaches the agent as the
turn's ``metadata["voice"]`` (UAMP 8.1's ``{"voice_id": ...}``), and a voice
the agent does not declare is refused at ``session.update``.

Clients that send ``OpenAI-Beta: realtime=v1`` (or offer the
``openai-beta.realtime-v1`` subprotocol) get the beta event names.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from uamp_proto.adapters import realtime as rt
from uamp_proto.ids import short_random_ids
from uamp_proto.payment import PaymentPolicy
from uamp_stores.realtime import RealtimeConnection

from ..engines.http import HTTPError
from ..engines.websocket import ConnectionClosed, WebSocketRequest
from ..hosting.host import Host, PolicyTransport
from ..hosting.middleware import reject_upgrade
from ..hosting.router import RouteMeta
from ..hosting.sessions import SessionLimits

__all__ = ["RealtimeTransport", "mount"]

#: What middleware knows of these routes: OpenAI error objects.
ROUTES = RouteMeta(transport="realtime", error_style="openai")

#: Longest a ``response.create`` is held for payment, by default (UAMP sessions' own).
_PAYMENT_WAIT = SessionLimits().payment_wait


class RealtimeTransport(PolicyTransport):
    """The Realtime endpoint of an :class:`~uamp_trio.app.App` (see :class:`PolicyTransport`)."""

    #: Longest a ``response.create`` is held for payment (as UAMP sessions'
    #: :attr:`~uamp_trio.hosting.sessions.SessionLimits.payment_wait`).
    payment_wait: float = _PAYMENT_WAIT

    def mount(self) -> None:
        """Register ``WS .../realtime`` (and ``/v1/realtime`` at the root)."""
        self.app.agent_websocket("/realtime", self.websocket, label="Realtime", meta=ROUTES)
        self.app.router.add_websocket("/v1/realtime", self.websocket, meta=ROUTES)

    async def websocket(self, pending: WebSocketRequest) -> None:
        """Accept a Realtime connection and serve it until it closes."""
        request = pending.request
        query = parse_qs(request.query)
        models = query.get("model")
        model = models[0] if models else None
        try:
            agent = self.app.resolve_agent(request.path_params, model=model)
        except HTTPError as exc:
            await reject_upgrade(pending, ROUTES.error_style, exc)
            return
        session, subprotocol = rt.open_session(
            agent.capabilities(),
            model=model,
            openai_beta=request.headers.get("openai-beta"),
            subprotocols=list(pending.subprotocols),
            expires_at=request.principal.expires_at,
            ids=short_random_ids,
        )
        ws = await pending.accept(subprotocol=subprotocol)
        try:
            connection = RealtimeConnection(
                ws,
                self.served(agent),
                session,
                request.principal,
                runner=self.app.turns.runner,
                closed=(ConnectionClosed,),
                conversations=self.app.conversations,
                payment_wait=self.payment_wait,
            )
            await connection.run()
        finally:
            await ws.close()


def mount(
    app: Host, *, payment_policy: PaymentPolicy | None = None, payment_wait: float | None = None
) -> None:
    """Mount the Realtime transport on ``app`` (a :data:`~uamp_trio.app.Transport`).

    ``payment_wait``: longest a response is held for payment (default
    :attr:`RealtimeTransport.payment_wait`).
    """
    transport = RealtimeTransport(app, payment_policy=payment_policy)
    if payment_wait is not None:
        if payment_wait <= 0:
            raise ValueError("payment_wait must be positive")
        transport.payment_wait = payment_wait
    transport.mount()
