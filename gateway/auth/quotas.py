"""Quotas on what a principal or tenant holds: bytes retained in the log and messages in flight.

The global settings (``max_retained_bytes_per_principal``, ``max_in_flight_per_principal``) give
each principal its own caps; a ``[[quotas]]`` entry of the auth config, the first one selecting a
principal, replaces them for it (``"unlimited"`` lifts one) and, with ``tenant = "<name>"``, makes
every principal it selects count against one shared quota of that name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gateway.auth.acl import selects
from gateway.auth.principal import Principal

QUOTA_KEYS = ("retained_bytes", "in_flight_messages")
MAX_TENANT_CHARS = 128


@dataclass(frozen=True, slots=True)
class QuotaSubject:
    """Who usage is counted for, ``tenant:<name>`` or ``principal:<name>``, with its caps (None:
    no cap of that kind)."""

    name: str
    retained_bytes: int | None
    in_flight_messages: int | None


@dataclass(frozen=True, slots=True)
class QuotaEntry:
    """One ``[[quotas]]`` entry: the principals it selects, the tenant they share (None: each
    principal counts alone) and the caps it sets (a None cap lifts the global one)."""

    principals: tuple[str, ...]
    tenant: str | None = None
    caps: Mapping[str, int | None] = field(default_factory=dict)

    def applies_to(self, principal: Principal) -> bool:
        """Whether one of the principal selectors names ``principal``."""
        return any(selects(selector, principal) for selector in self.principals)


class QuotaRules:
    """The global caps and the ``[[quotas]]`` entries in config order."""

    def __init__(self, entries: Sequence[QuotaEntry] = (), retained_bytes: int = 0,
                 in_flight_messages: int = 0) -> None:
        self._entries = tuple(entries)
        self._defaults: dict[str, int | None] = {
            "retained_bytes": retained_bytes or None,
            "in_flight_messages": in_flight_messages or None,
        }

    def enabled(self, kind: str) -> bool:
        """Whether some principal may have a cap of ``kind`` (else nothing needs counting)."""
        return self._defaults[kind] is not None or any(
            entry.caps.get(kind) is not None for entry in self._entries)

    def subject_for(self, principal: Principal) -> QuotaSubject:
        """The subject ``principal``'s usage counts against, with its caps."""
        for entry in self._entries:
            if entry.applies_to(principal):
                caps = {**self._defaults, **entry.caps}
                name = (f"tenant:{entry.tenant}" if entry.tenant is not None
                        else f"principal:{principal.name}")
                return QuotaSubject(name, caps["retained_bytes"], caps["in_flight_messages"])
        return QuotaSubject(f"principal:{principal.name}", self._defaults["retained_bytes"],
                            self._defaults["in_flight_messages"])
