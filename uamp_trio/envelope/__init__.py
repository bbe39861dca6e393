"""Spec 003 on the wire: the binding-neutral envelope service and its keys.

:mod:`uamp_trio.envelope.service` verifies envelopes and runs their
exchanges against the hosted agents; every binding (HTTP + SSE, the
length-prefixed WebSocket, gRPC, HTTP/3) only reads and writes bytes around
it. The service's parts: :mod:`~uamp_trio.envelope.exchange` (one exchange
and its frames), :mod:`~uamp_trio.envelope.turns` (an exchange's run),
:mod:`~uamp_trio.envelope.remote` (exchanges across processes),
:mod:`~uamp_trio.envelope.fields` (what is read from an envelope) and
:mod:`~uamp_trio.envelope.notes` (one-way messages waiting for an exchange).
:mod:`uamp_trio.envelope.keys` holds the server's envelope key. This
package ``__init__`` imports nothing, so the trust layer and the bindings
can import its modules without a cycle. See docs/envelope.md.
"""
