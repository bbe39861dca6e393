"""The ``uamp`` command line (also ``python -m uamp`` and ``python -m uamp_trio``).

``uamp serve [--host H] [--port P] [--agent module:attr ...] [--certfile F --keyfile F]
[--tls-min 1.2] [--client-ca PATH] [--http3]``
hosts agents with every built-in transport and prints the URL of each
endpoint. SIGINT/SIGTERM start a graceful shutdown (a second signal stops at
once); the process exits 0. By default it hosts ``demo``: a UAP agent
(:func:`uamp_agents.bridge.demo_agent`, the offline demo model with the tools
``add`` and ``now``) served through the agent bridge.

It behaves like the Python servers operators know (uvicorn, hypercorn):
``--agent mymod:agent`` imports ``mymod`` from the current directory first;
``--reload`` runs the server in a child process and restarts it when a
Python file under ``--reload-dir`` (the current directory) changes; one
access line per request (``--no-access-log`` to silence it), timestamps on
every log line, ``--log-format json`` for log shippers; ``GET /metrics``
(``--no-metrics`` to leave it out) and OpenTelemetry traces with ``--otel``
or ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the ``otel`` extra). Every operator
mistake -- a bad flag value, a port in use, an agent that does not import,
a certificate that does not load -- is one line on stderr and exit status 2
(1 when the server could not listen), never a traceback.

``--agent`` takes anything satisfying :class:`uamp_proto.responder.Responder`, or a
:class:`uamp_agents.Agent` (the UAP runtime), which is wrapped with
:func:`uamp_agents.bridge.serve_agent`; this module is the only place that
knows both layers.

``--signing-key PATH`` (a PEM RSA private key) signs every transport's
responses (spec 004 "Response Signing") and publishes the public key at
``/.well-known/jwks.json``; ``uamp verify`` checks a saved response against
such a JWKS (:mod:`uamp_trio.verify`).
Authentication (docs/security.md): ``--auth-jwks PATH_OR_URL --auth-issuer
ISS --auth-audience AUD`` accepts JWT bearer tokens, ``--auth-api-keys PATH``
static API keys (both may be given), ``--allow-anonymous`` lets callers
without a token in. With no authentication configured, ``uamp serve`` only
binds a loopback address; elsewhere it refuses to start and names the flags.

``uamp serve`` and ``uamp acp`` charge each response to a payment token of a
ledger with ``--ledger PATH --price AMOUNT``; ``uamp tokens`` issues and
inspects those tokens (:mod:`uamp_trio.trust.commands`).

``uamp acp [--agent module:attr] [--ledger PATH]`` runs one agent (the
demo agent by default) as an Agent Client Protocol agent on stdin/stdout, for
editors; it exits when stdin closes. ``uamp mcp [--agent module:attr | NAME]``
does the same as a Model Context Protocol server (docs/mcp.md).

Subcommands are rows of :data:`uamp_trio.command_line.COMMANDS`, the entry
point's table: each names a function that adds its parser to the ``argparse``
sub-parsers and sets ``func`` (taking the parsed arguments, returning the exit
code); the ``uamp`` script imports this package only for the ones it defines.

The package, one job a module:

* :mod:`.flags` -- ``uamp serve``'s flags (the limits table, the groups);
* :mod:`.parts` -- what those flags build: authenticator, response signer,
  envelope options, transports (also used by :mod:`uamp_trio.asgi_options`);
* :mod:`.agents` -- ``--agent`` loading, the default agent, and what the flags
  give UAP agents: the only module here that knows :mod:`uamp_agents`;
* :mod:`.serve` -- ``uamp serve``'s run: checks, ``--reload``, workers, the
  app and server, signals, the printed URLs;
* :mod:`.connect` -- ``uamp connect``;
* :mod:`.stdio` -- ``uamp acp`` and ``uamp mcp``.

This ``__init__`` re-exports the names callers import from ``uamp_trio.cli``.
"""

from __future__ import annotations

from ..command_line import build_parser, main
from .agents import approve_tools as approve_tools
from .agents import default_agent, load_agent
from .agents import mcp_tools as mcp_tools
from .agents import uap_endpoint as uap_endpoint
from .flags import LIMIT_FLAGS as _LIMIT_FLAGS  # noqa: F401 (tests read the table)
from .parts import build_authenticator, load_signer
from .parts import envelope_options as envelope_options
from .parts import envelopes_refused as envelopes_refused
from .serve import FULL_COLLECTION_EVERY as FULL_COLLECTION_EVERY
from .serve import OPEN_BIND_REFUSED as OPEN_BIND_REFUSED
from .serve import RELAY_AUTH as RELAY_AUTH
from .serve import RELAY_OPEN as RELAY_OPEN
from .serve import RELOADED_CHILD as RELOADED_CHILD
from .serve import print_urls as print_urls
from .serve import settle_garbage_collector as settle_garbage_collector

__all__ = [
    "build_authenticator",
    "build_parser",
    "default_agent",
    "load_agent",
    "load_signer",
    "main",
]
