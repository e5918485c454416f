"""Authentication and authorization errors; ``gateway.errors`` maps them to 401/403 and WebSocket
close codes."""

from __future__ import annotations


class AuthError(Exception):
    """Base of the auth errors; ``message`` is safe to show to the client."""

    retriable = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unauthenticated(AuthError):
    """No credentials, or credentials that do not prove who the caller is (401 / close 4401)."""

    def __init__(
        self, message: str, *, credentials_given: bool = False, expired: bool = False
    ) -> None:
        super().__init__(message)
        self.credentials_given = credentials_given
        self.expired = expired


class Forbidden(AuthError):
    """The caller is known but may not do this (403 / close 4403)."""


class GroupsLimitReached(Forbidden):
    """The principal already created ``limit`` consumer groups and asked for a new one (403
    groups-limit / 4403)."""

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class QuotaExceeded(AuthError):
    """A principal's or tenant's quota of ``kind`` (``retained_bytes``: 507 quota-retained-bytes;
    ``in_flight_messages``: 429 quota-in-flight) has no room for the request; nothing was done."""

    retriable = True

    def __init__(self, message: str, kind: str, subject: str, limit: int, used: int,
                 retry_after_s: float) -> None:
        super().__init__(message)
        self.kind, self.subject, self.limit, self.used = kind, subject, limit, used
        self.retry_after_s = retry_after_s


class AuthConfigError(AuthError):
    """The auth configuration (settings, TOML file, JWKS, secrets) is unusable; the gateway does not
    start."""


class UnknownKeyId(Unauthenticated):
    """A token names a key id the JWKS read from a URL lacks: worth one refresh of the key set
    before it is refused (401 / close 4401)."""

    def __init__(self, message: str, kid: str) -> None:
        super().__init__(message, credentials_given=True)
        self.kid = kid
