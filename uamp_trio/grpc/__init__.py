"""gRPC over uamp's own HTTP/2 engine: one home for every gRPC service uamp serves.

The wire format (length-prefixed messages, status codes, ``grpc-timeout``,
trailers) is sans-IO in :mod:`uamp_proto.grpc`; this package binds it to the
engines and the route table (:mod:`uamp_trio.grpc.service`, whose docstring
explains a call from head to trailers). ``grpcio`` is only ever a client
(the tests'); the server is ours.

Registering a service
---------------------
1. Write the ``.proto`` under ``uamp_trio/grpc/protos/`` (its package path
   as directories: ``uamp/v1/agent.proto``) and run ``python
   scripts/gen_protos.py``; the generated ``*_pb2.py`` lands beside it and is
   committed (``tests/trio/grpc/test_protos_current.py`` fails when it is out
   of date). Import the messages from there::

       from uamp_trio.grpc.protos.uamp.v1 import agent_pb2

2. In the transport's ``mount(host)``, build a :class:`GrpcService` named
   after the proto's ``package.Service`` and register one handler per rpc
   with the decorator of its kind (``unary``, ``server_stream``,
   ``client_stream``, ``bidi``)::

       service = GrpcService("uamp.v1.Agent")

       @service.server_stream("Send", agent_pb2.Envelope, agent_pb2.Delta)
       async def send(envelope, context, send):
           name = context.metadata.get("uamp-agent")
           agent = host.resolve_agent({"agent": name} if name else {})
           await send(agent_pb2.Delta(...))  # one response message per send

       mount_service(host.router, service, transport="uamp-grpc")

   A handler ends the call with ``raise GrpcError(StatusCode.X, "why")``;
   anything else it raises is ``INTERNAL`` (logged, no detail sent).
   ``context.principal`` is who the authentication middleware let in (a
   refused call never reaches the handler: it is answered with the status
   for the refusal, ``UNAUTHENTICATED`` for a 401), ``context.metadata`` the
   request headers, ``context.trailers`` extra trailers to send.

3. Mount the transport in :func:`uamp_trio.app.default_transports`. The root
   answers calls of unknown methods (any path with a gRPC content type that
   no route takes) with ``UNIMPLEMENTED``.

gRPC paths name no agent (clients cannot add a path prefix): a service that
hosts several agents picks one from metadata (uamp's services read
``uamp-agent``) or from the message itself.
"""

from importlib.util import find_spec

from uamp_proto.grpc import GrpcError, StatusCode

from .service import Context, GrpcService, MethodKind, mount_service, trailers_only, unimplemented


def _installed(*modules: str) -> bool:
    try:
        return all(find_spec(module) is not None for module in modules)
    except ModuleNotFoundError:  # the parent package is missing
        return False


#: Whether the ``grpc`` extra (protobuf and the google.rpc messages) is
#: installed: without it the gRPC bindings are not mounted and the rest serves.
AVAILABLE = _installed("google.protobuf", "google.rpc")

__all__ = [
    "AVAILABLE",
    "Context",
    "GrpcError",
    "GrpcService",
    "MethodKind",
    "StatusCode",
    "mount_service",
    "trailers_only",
    "unimplemented",
]
