"""Authorization: ACL rules mapping principals to topic patterns, group patterns and actions. Deny
by default.

A rule's ``principals`` are exact names, ``*`` (anyone authenticated) or claim matches
``claim:<name>=<value>`` (a JWT claim equal to the value, or a list claim containing it). ``topics``
and ``groups`` are fnmatch globs. Actions: ``publish`` (on a dead-letter topic ``<topic>.dlq`` only
through a pattern that ends in ``.dlq``); ``subscribe`` (replay, WebSocket subscribe, HTTP
pull/ack/nack/extend, group list and describe); ``admin`` (topic create/change/delete, purge,
group seek, parked keys, DLQ redrive; also sees groups), of which a principal with a forced header
filter keeps only what reaches its own tenant (docs/security.md).
"""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gateway.auth.principal import Principal
from gateway.delivery.dead_letters import DLQ_SUFFIX


class Action(enum.Enum):
    """What a principal wants to do to a topic."""

    PUBLISH = "publish"
    SUBSCRIBE = "subscribe"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class Rule:
    """Principals matching ``principals`` may do ``actions`` on topics (and groups) matching the
    patterns."""

    principals: tuple[str, ...]
    topics: tuple[str, ...]
    actions: frozenset[Action]
    groups: tuple[str, ...] = ("*",)

    def applies_to(self, principal: Principal) -> bool:
        """Whether one of the principal selectors names this principal."""
        return any(selects(selector, principal) for selector in self.principals)

    def grants(self, action: Action, topic: str, group: str | None) -> bool:
        """Whether the rule grants ``action`` on ``topic`` (and ``group`` when one is involved)."""
        patterns = (_dlq_patterns(self.topics) if action is Action.PUBLISH and is_dlq(topic)
                    else self.topics)
        return (action in self.actions and _any_glob(patterns, topic)
                and (group is None or _any_glob(self.groups, group)))


def is_dlq(topic: str) -> bool:
    """Whether ``topic`` is a dead-letter topic, written by the gateway's own paths."""
    return topic.endswith(DLQ_SUFFIX)


def _dlq_patterns(patterns: Iterable[str]) -> tuple[str, ...]:
    """The patterns that name dead-letter topics explicitly (``orders.dlq``, ``*.dlq``): a forged
    dead letter would be redriven into its source topic, so ``orders.*`` or ``*`` must not grant
    publishing one."""
    return tuple(pattern for pattern in patterns if pattern.endswith(DLQ_SUFFIX))


@dataclass(frozen=True, slots=True)
class ForcedFilter:
    """Headers every message read or written by the selected principals must carry (e.g.
    tenant=a)."""

    principals: tuple[str, ...]
    headers: Mapping[str, str]


def selects(selector: str, principal: Principal) -> bool:
    """Whether a principal selector (name, ``*`` or ``claim:<name>=<value>``) names
    ``principal``."""
    if selector == "*":
        return True
    if selector.startswith("claim:"):
        claim, _, wanted = selector.removeprefix("claim:").partition("=")
        value = principal.claims.get(claim)
        if isinstance(value, list):
            return wanted in [str(item) for item in value]
        return value is not None and str(value) == wanted
    return selector == principal.name


def selector_claim(selector: str) -> str | None:
    """The JWT claim a ``claim:<name>=<value>`` selector matches on; None for other selectors."""
    if not selector.startswith("claim:"):
        return None
    return selector.removeprefix("claim:").partition("=")[0]


def _any_glob(patterns: Iterable[str], name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


class Acl:
    """The rule set; every question is answered for one principal."""

    def __init__(self, rules: Sequence[Rule], filters: Sequence[ForcedFilter] = (), *,
                 allow_all: bool = False):
        self._rules = tuple(rules)
        self._filters = tuple(filters)
        self._allow_all = allow_all  # auth_mode=none: everything is allowed, nothing is filtered

    @classmethod
    def open(cls) -> Acl:
        """Everything allowed (``auth_mode=none``)."""
        return cls((), allow_all=True)

    def allows(self, principal: Principal, action: Action, topic: str,
               group: str | None = None) -> bool:
        """Whether ``principal`` may do ``action`` on ``topic`` (through ``group``, for group
        actions)."""
        return self._allow_all or any(rule.grants(action, topic, group)
                                      for rule in self._rules_for(principal))

    def allows_any(self, principal: Principal, topic: str,
                   actions: Iterable[Action] = tuple(Action), group: str | None = None) -> bool:
        """Whether ``principal`` may do at least one of ``actions`` on ``topic``."""
        return any(self.allows(principal, action, topic, group) for action in actions)

    def allows_somewhere(self, principal: Principal, action: Action) -> bool:
        """Whether some rule lets ``principal`` do ``action`` on some topic."""
        return self._allow_all or any(action in rule.actions
                                      for rule in self._rules_for(principal))

    def may_know_group(self, principal: Principal, group: str) -> bool:
        """Whether some rule could let ``principal`` read or administer ``group`` (on any topic)."""
        if self._allow_all:
            return True
        return any(_any_glob(rule.groups, group) and rule.actions & {Action.SUBSCRIBE, Action.ADMIN}
                   for rule in self._rules_for(principal))

    def forced_headers(self, principal: Principal) -> dict[str, str]:
        """Headers forced on everything ``principal`` reads or writes; a conflict between filters is
        an error."""
        if self._allow_all:
            return {}
        headers: dict[str, str] = {}
        for forced in self._filters:
            if any(selects(selector, principal) for selector in forced.principals):
                for name, value in forced.headers.items():
                    if headers.setdefault(name, value) != value:
                        raise ValueError(f"forced filters disagree on header {name!r} for "
                                         f"{principal.name!r}")
        return headers

    def forced_header_names(self) -> frozenset[str]:
        """Every header name some filter forces."""
        return frozenset(name for forced in self._filters for name in forced.headers)

    def selectors(self) -> frozenset[str]:
        """Every principal selector of the rules and filters."""
        return frozenset(selector for principals in [*(rule.principals for rule in self._rules),
                                                     *(kept.principals for kept in self._filters)]
                         for selector in principals)

    def _rules_for(self, principal: Principal) -> Iterable[Rule]:
        return (rule for rule in self._rules if rule.applies_to(principal))
