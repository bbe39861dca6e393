"""Where the server keeps state that outlives one request.

The core (:mod:`uamp_proto`) maps protocols onto UAMP and keeps nothing;
what a server must remember between requests (A2A tasks today) lives here,
behind a small interface a database-backed store can implement later.

Where this wing sits: docs/architecture.md.
"""
