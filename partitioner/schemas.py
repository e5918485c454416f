"""Topic schema versions in etcd: one key per version of a topic incarnation, registered in order
and mirrored by every gateway through a watch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

COMPATIBILITY_MODES = ("backward", "backward_transitive", "forward", "forward_transitive", "full",
                       "full_transitive", "none")


@dataclass(frozen=True, slots=True)
class SchemaRecord:
    """One registered version of a topic's schema: ``version`` counts from 1 per topic incarnation
    (``topic_created_at_ms``); ``fingerprint`` is the SHA-256 of the schema's canonical JSON."""

    topic: str
    topic_created_at_ms: int
    version: int
    schema: Mapping[str, Any]
    compatibility: str
    fingerprint: str
    created_at_ms: int
    created_by: str
