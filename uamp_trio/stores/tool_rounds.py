"""The server-side tool rounds store: pure, so it lives in :mod:`uamp_proto.tool_rounds`."""

from uamp_proto.tool_rounds import DEFAULT_MAX_ROUNDS, ToolRoundStore

__all__ = ["DEFAULT_MAX_ROUNDS", "ToolRoundStore"]
