"""Transports: one module per protocol onto the hosted agents (see docs/architecture.md).

Chat Completions (:mod:`.completions`), UAMP over WebSocket (:mod:`.uamp_ws`)
and over HTTP+SSE (:mod:`.sse_events`), A2A (:mod:`.a2a`), ACP (:mod:`.acp`),
AG-UI (:mod:`.agui`) and the OpenAI Realtime API (:mod:`.realtime`). Each is
a plain module with a ``mount(app)`` the composition root (:mod:`uamp_trio.app`)
calls; transports know nothing of each other.
"""
