"""Event tokens: short-lived, HMAC-signed stand-ins for a principal's credentials, accepted only by
the Server-Sent Events route of one topic (a browser's ``EventSource`` cannot send headers)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import math
import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.auth.errors import Unauthenticated
from gateway.auth.principal import ANONYMOUS, Principal

log = logging.getLogger(__name__)

VERSION = "sget1"
# the key is derived, so a token's MAC can never be replayed as a pull receipt's, nor the reverse
DERIVATION_LABEL = b"event-token"
DEFAULT_TTL_S = 60
MAX_TTL_S = 300
KEY_BYTES = 32
# the claims bound are only those selectors match on: a longer token is not one of ours
MAX_TOKEN_CHARS = 4096
PRINCIPAL_KINDS = frozenset({"jwt", "api_key", "anonymous"})
INVALID = "invalid or expired event token"


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A minted token and when it stops being accepted (epoch ms)."""

    token: str
    expires_at_ms: int


class EventTokenSigner:
    """Mints and checks event tokens with a key derived from the receipt secret, so every replica
    that shares the secret accepts the tokens of the others."""

    def __init__(self, secret: bytes) -> None:
        self._key = hmac.new(secret, DERIVATION_LABEL, hashlib.sha256).digest()

    @classmethod
    def random(cls) -> EventTokenSigner:
        """A signer with a fresh key: its tokens work only in this process."""
        return cls(secrets.token_bytes(KEY_BYTES))

    def issue(self, principal: Principal, topic: str, ttl_s: int, now_ms: int,
              claim_names: Collection[str] = ()) -> IssuedToken:
        """A token for ``principal`` on ``topic``, valid ``ttl_s`` but never past the principal's
        own credential; only the claims in ``claim_names`` are carried."""
        expires_at_ms = now_ms + ttl_s * 1000
        if principal.expires_at_s is not None:
            expires_at_ms = min(expires_at_ms, math.floor(principal.expires_at_s * 1000))
        claims = {name: principal.claims[name] for name in sorted(claim_names)
                  if name in principal.claims}
        payload = orjson.dumps([principal.name, principal.kind, claims, principal.expires_at_s,
                                expires_at_ms])
        token = f"{VERSION}.{_b64(payload)}.{_b64(self._tag(topic, payload))}"
        return IssuedToken(token, expires_at_ms)

    def verify(self, token: str, topic: str, now_ms: int) -> Principal:
        """The principal a token stands for on ``topic``; Unauthenticated, saying no more than
        ``INVALID``, when it is malformed, signed for another topic or key, or expired."""
        try:
            payload = self._signed_payload(token, topic)
            principal, expires_at_ms = _principal_from(orjson.loads(payload))
        except (ValueError, TypeError, binascii.Error):  # orjson.JSONDecodeError is a ValueError
            raise Unauthenticated(INVALID, credentials_given=True) from None
        if now_ms >= expires_at_ms:
            raise Unauthenticated(INVALID, credentials_given=True, expired=True)
        return principal

    def _signed_payload(self, token: str, topic: str) -> bytes:
        if len(token) > MAX_TOKEN_CHARS or token.count(".") != 2:
            raise ValueError("not a token")
        version, payload_text, tag_text = token.split(".")
        if version != VERSION:
            raise ValueError("another version")
        payload = _unb64(payload_text)
        if not hmac.compare_digest(_unb64(tag_text), self._tag(topic, payload)):
            raise ValueError("bad signature")
        return payload

    def _tag(self, topic: str, payload: bytes) -> bytes:
        # The topic is signed but not carried: a token shown for another topic fails the check.
        bound = orjson.dumps([VERSION, topic])
        return hmac.new(self._key, bound + payload, hashlib.sha256).digest()


def event_token_signer_for(secret: str | None) -> EventTokenSigner:
    """The signer of the configured receipt secret; without one, a random key, announced because
    event tokens then work only on the gateway process that minted them."""
    if secret is None:
        log.warning("receipt_secret is not set: event tokens are signed with a random key and are "
                    "accepted only by this gateway process; set STREAMGATE_RECEIPT_SECRET on "
                    "every replica")
        return EventTokenSigner.random()
    return EventTokenSigner(secret.encode())


def _principal_from(data: Any) -> tuple[Principal, int]:
    if not isinstance(data, list) or len(data) != 5:
        raise ValueError("wrong shape")
    name, kind, claims, credential_expires_at_s, expires_at_ms = data
    if not (isinstance(name, str) and kind in PRINCIPAL_KINDS and isinstance(claims, Mapping)
            and _is_number_or_none(credential_expires_at_s) and isinstance(expires_at_ms, int)):
        raise ValueError("wrong types")
    if kind == "anonymous":
        return ANONYMOUS, expires_at_ms
    expires = None if credential_expires_at_s is None else float(credential_expires_at_s)
    return Principal(name, kind, dict(claims), expires), expires_at_ms


def _is_number_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
