"""API keys: random, high-entropy strings given to a client once; only their SHA-256 is kept in the
config.

A plain SHA-256 (no salt, no stretching) is enough because the keys are 256-bit random values, not
passwords: nothing to brute-force from the hash.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

KEY_PREFIX = "sgk_"
KEY_BYTES = 32
SHA256_HEX_LENGTH = 64


def new_api_key() -> str:
    """A fresh random API key (``sgk_`` + 43 URL-safe characters)."""
    return KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


def hash_api_key(key: str) -> str:
    """The SHA-256 (hex) of a key, as stored in the auth config."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class StoredKey:
    """One configured key: its hash and the principal it authenticates."""

    principal: str
    sha256: str


class ApiKeyTable:
    """Finds the principal of a presented key, comparing hashes in constant time."""

    def __init__(self, keys: Iterable[StoredKey]) -> None:
        self._keys = tuple(keys)

    def __len__(self) -> int:
        return len(self._keys)

    def principal_for(self, key: str) -> str | None:
        """The principal whose stored hash matches ``key``, or None."""
        presented = hash_api_key(key).encode()
        found = None
        # every entry is compared, so timing does not tell which one matched
        for stored in self._keys:
            if hmac.compare_digest(presented, stored.sha256.encode()):
                found = stored.principal
        return found
