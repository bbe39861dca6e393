"""Pure translations between other protocols and UAMP events.

One module per protocol (``completions``, ``realtime``, ``a2a``, ``acp``,
``agui``), each turning that protocol's requests into a
:class:`~uamp_proto.responder.TurnRequest` and UAMP events into its wire
format; ``_tools`` parses tool declarations and calls for all of them and
``_media`` builds content items from media parts. The servers in
``uamp_trio.transports`` do the I/O around them.

Where adapters sit between transports and the core: docs/architecture.md.
"""
