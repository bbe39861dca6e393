"""Who a request acts for: :class:`Principal` (a pure value; see docs/security.md).

The server's authentication layer turns a caller's credential into a
principal; everything below it -- transports, sessions, stores, the ledger and
the agent's :class:`~uamp_proto.responder.TurnRequest` -- only ever sees the
principal, never the credential. Objects record the principal that created
them and answer any other as if they did not exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["ANONYMOUS", "Principal"]


@attrs.frozen(kw_only=True)
class Principal:
    """Who a request acts for.

    Attributes:
        id: Stable identifier (a JWT's ``sub``, an API key's principal name).
        scheme: How it was established: ``jwt``, ``api_key``, ``anonymous``, ``local``.
        expires_at: When the credential stops being valid (seconds since the
            epoch), or ``None``.
        claims: The verified JWT claims (empty for other schemes).
    """

    id: str
    scheme: str
    expires_at: float | None = None
    claims: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    @property
    def key(self) -> tuple[str, str]:
        """What ownership compares: ``(scheme, id)``.

        Two credentials of one caller (a refreshed JWT, a later request) own
        the same objects; expiry and claims play no part.
        """
        return (self.scheme, self.id)

    def expired(self, now: float) -> bool:
        """Whether the credential has expired at ``now``."""
        return self.expires_at is not None and now >= self.expires_at


#: The principal of every caller when no authentication is configured.
ANONYMOUS = Principal(id="anonymous", scheme="anonymous")
