"""Agents without a public address: the relay and the daemon (docs/relay.md).

* :mod:`uamp_trio.relay.platform` -- ``uamp serve --relay``: daemons dial in
  and register agents that every transport then serves.
* :mod:`uamp_trio.relay.daemon` -- ``uamp connect``: dial a relay and serve
  agents over that one socket.
"""
