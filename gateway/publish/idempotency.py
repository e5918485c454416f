"""Idempotency-key name spaces: each principal's keys apart from every other's, the gateway's own
apart from all.

Storage keeps one dedup key per (partition, stored key); the stored key is the client's key behind
its name space, so two principals using the same key never see or suppress each other's writes.
"""

from __future__ import annotations

# the gateway's own writes (dead letters, redrive); no principal's scope starts like this
INTERNAL_SCOPE = "i:"


def principal_scope(principal_name: str) -> str:
    """The prefix of a principal's stored keys: the name with its length, so that no two names share
    a prefix (``a`` + ``b:c`` and ``a:b`` + ``c`` stay apart)."""
    return f"p{len(principal_name)}:{principal_name}:"


def internal_key(*parts: object) -> str:
    """A stored key for one of the gateway's own writes, out of every principal's reach."""
    return INTERNAL_SCOPE + ":".join(str(part) for part in parts)
