"""Server-side header filters: ``filter=<header>:<v1>,<v2>`` keeps messages whose header is one of
the values.

Several ``filter`` parameters must all match. A group's filtered-out messages are acked for that
group and never delivered.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.errors import invalid_field

HEADER_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
MAX_FILTERS = 16
MAX_VALUES = 64


@dataclass(frozen=True, slots=True)
class HeaderFilter:
    """Messages pass when, for every clause, the header is present and its value is among the
    allowed ones."""

    clauses: tuple[tuple[str, frozenset[str]], ...] = ()

    def matches(self, headers: Mapping[str, str]) -> bool:
        """Whether a message with these headers passes."""
        return all(headers.get(name) in allowed for name, allowed in self.clauses)

    @property
    def is_empty(self) -> bool:
        """True when every message passes."""
        return not self.clauses

    def and_headers(self, forced: Mapping[str, str]) -> HeaderFilter:
        """This filter ANDed with ``header == value`` for each forced header (a principal's tenant
        filter)."""
        clauses = dict(self.clauses)
        for name, value in forced.items():
            clauses[name] = clauses.get(name, frozenset({value})) & frozenset({value})
        return HeaderFilter(tuple(sorted(clauses.items())))

    def describe(self) -> str:
        """A canonical text form (equal filters give equal text)."""
        return ";".join(f"{name}:{','.join(sorted(values))}"
                        for name, values in sorted(self.clauses))


def parse_filters(raw: Iterable[str]) -> HeaderFilter:
    """Parse ``filter`` query values; 422 pointing at ``/filter`` when one is malformed."""
    clauses: dict[str, frozenset[str]] = {}
    for text in raw:
        name, sep, values = text.partition(":")
        allowed = frozenset(v for v in values.split(",") if v)
        if not sep or not HEADER_NAME.fullmatch(name) or not allowed or len(allowed) > MAX_VALUES:
            raise invalid_field("/filter",
                                f"filter {text!r} must look like <header>:<value>[,<value>...]")
        clauses[name] = clauses.get(name, allowed) & allowed
    if len(clauses) > MAX_FILTERS:
        raise invalid_field("/filter", f"at most {MAX_FILTERS} filters")
    return HeaderFilter(tuple(sorted(clauses.items())))
