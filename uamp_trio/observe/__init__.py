"""Observability: request observation, the access log, metrics and traces."""
