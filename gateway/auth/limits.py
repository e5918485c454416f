"""Per-principal rate-limit overrides from the auth config (``[[limits]]``): the first matching
entry wins.

An entry selects principals like an ACL rule (exact names, ``*``, ``claim:<name>=<value>``) and
gives some of ``messages_per_s``, ``bytes_per_s`` (publish), ``reads_per_s`` (replay and pull
requests) and ``subscribes_per_s`` (new WebSocket subscriptions). A rate it gives replaces the
global setting for that principal (``"unlimited"`` lifts it); a rate it leaves out keeps the global
setting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gateway.auth.acl import selects
from gateway.auth.principal import Principal

RATE_KEYS = ("messages_per_s", "bytes_per_s", "reads_per_s", "subscribes_per_s")
UNLIMITED = "unlimited"


@dataclass(frozen=True, slots=True)
class LimitOverride:
    """The rates that replace the global ones for the selected principals; a None rate means
    unlimited."""

    principals: tuple[str, ...]
    rates: Mapping[str, float | None] = field(default_factory=dict)

    def applies_to(self, principal: Principal) -> bool:
        """Whether one of the principal selectors names ``principal``."""
        return any(selects(selector, principal) for selector in self.principals)


class LimitOverrides:
    """The ``[[limits]]`` entries in config order."""

    def __init__(self, overrides: Sequence[LimitOverride] = ()) -> None:
        self._overrides = tuple(overrides)

    def __len__(self) -> int:
        return len(self._overrides)

    def rates_for(self, principal: Principal) -> Mapping[str, float | None]:
        """The rates the first entry selecting ``principal`` gives ({} when none does)."""
        for override in self._overrides:
            if override.applies_to(principal):
                return override.rates
        return {}

    def selectors(self) -> frozenset[str]:
        """Every principal selector of the entries."""
        return frozenset(selector for override in self._overrides
                         for selector in override.principals)

    @property
    def sets_any_rate(self) -> bool:
        """Whether some entry sets a finite rate (then a throttle is needed even with no global
        limit)."""
        return any(
            rate is not None for override in self._overrides for rate in override.rates.values()
        )
