"""The Google A2A transport: JSON-RPC, HTTP+JSON, gRPC and spec 004's task routes, one task model.

* :mod:`.service` -- :class:`A2ATransport`: the card, the operations every
  binding calls, the JSON-RPC binding and spec 004's REST form;
* :mod:`.sends` -- a send admitted: its message checked, its task created or
  resumed, its place in the context and its price held;
* :mod:`.tasks` -- the turns: run in the server's background nursery,
  followed, cancelled (from any process), signed and announced;
* :mod:`.rest` -- the HTTP+JSON binding (A2A 1.0 section 11);
* :mod:`.grpc` -- the gRPC binding (section 10), on :mod:`uamp_trio.grpc`;
* :class:`PushSender` -- push-notification delivery to webhooks
  (:mod:`uamp_stores.a2a_push`, shared with the ASGI app);
* :mod:`.call` -- what the bindings share (the call, an opened stream);
* ``spec/`` -- the A2A 1.0 JSON schema, as published by the A2A project
  (Apache-2.0; its ``a2a.proto`` is under ``uamp_trio/grpc/protos/third_party``).

The sans-IO translation lives in :mod:`uamp_proto.adapters.a2a` (tasks,
parts, JSON-RPC), :mod:`~uamp_proto.adapters.a2a_card` and
:mod:`~uamp_proto.adapters.a2a_params`.
"""

from __future__ import annotations

from uamp_stores.a2a_push import PushSender

from .service import A2ATransport, mount, transport

__all__ = ["A2ATransport", "PushSender", "mount", "transport"]
