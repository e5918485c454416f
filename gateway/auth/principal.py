"""Who is calling: a principal name, the claims that authenticated it and when its credential
expires."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ANONYMOUS_NAME = "anonymous"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller.

    ``claims`` are the JWT's claims (empty for API keys); ACL rules may match them. ``expires_at_s``
    is the token's ``exp`` (epoch seconds) or None when the credential does not expire (API keys).
    """

    name: str
    kind: str  # "jwt" | "api_key" | "anonymous"
    claims: Mapping[str, Any] = field(default_factory=dict)
    expires_at_s: float | None = None

    @property
    def is_anonymous(self) -> bool:
        """True when authentication is off (``auth_mode=none``)."""
        return self.kind == "anonymous"


ANONYMOUS = Principal(ANONYMOUS_NAME, "anonymous")
