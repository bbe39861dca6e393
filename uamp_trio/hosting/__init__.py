"""Hosting: what every transport shares (see docs/architecture.md).

The route table, the hosted agents, UAMP sessions (:mod:`.sessions`) and the
per-response runner (:mod:`.turns`) that every transport drives an agent
through. Nothing here imports a transport.
"""
