"""The trust layer: who a caller is (authentication), what they own, what they pay.

The composition root builds these parts and wraps every transport with them
once; transports receive the resulting principal and never see raw credentials.

Where this wing sits: docs/architecture.md; what it guarantees: docs/security.md.
"""

from .auth import (
    ANONYMOUS,
    AnonymousAuthenticator,
    AnyOf,
    APIKeyAuthenticator,
    Authenticator,
    AuthError,
    JWTAuthenticator,
    Principal,
    bearer_token,
    is_loopback,
)

__all__ = [
    "ANONYMOUS",
    "APIKeyAuthenticator",
    "AnonymousAuthenticator",
    "AnyOf",
    "AuthError",
    "Authenticator",
    "JWTAuthenticator",
    "Principal",
    "bearer_token",
    "is_loopback",
]
