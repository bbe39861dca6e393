"""Engines: bytes <-> requests (see docs/architecture.md).

HTTP/1.1 (:mod:`.http1`, with the fast head parser :mod:`.h1fast`), HTTP/2
(:mod:`.http2`), WebSocket (:mod:`.websocket` over wsproto, and the framing
engines of :mod:`.ws_frames` that the UAMP transport and client share), the
request/response types every endpoint speaks (:mod:`.http`) and the listener
(:mod:`.server`). An engine turns a connection into :class:`~.http.Request`
objects and WebSocket upgrades and hands each to a dispatch callable it is
given; it imports no router and no transport.
"""
