"""The trust layer: who a caller is (authentication), what they own, what they pay.

The composition root builds these parts and wraps every transport with them
once; transports receive the resulting principal and never see raw credentials.

Where this wing sits: docs/architecture.md; what it guarantees: docs/security.md.
"""

from . import auth
from .auth import *  # noqa: F403

# The wing's public names are the authentication module's.
__all__ = auth.__all__
