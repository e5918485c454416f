"""Groups and forced header filters: every member of a group reads through one filter, a filtered
principal administers only groups bound to its own filter, and its keys' state is kept in its own
key space (docs/security.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import orjson

from gateway.auth.errors import Forbidden
from gateway.auth.gatekeeper import Gatekeeper
from gateway.auth.principal import Principal
from gateway.errors import Problem
from gateway.services import Services
from partitioner.topics import TopicMetadata


async def bind_group(services: Services, gatekeeper: Gatekeeper, principal: Principal,
                     topic: TopicMetadata, group: str) -> None:
    """Bind ``group`` to the filter ``principal`` reads through, if no member bound it yet; 403
    when it is bound to another (a member acks for the group what its filter skips, so members
    under two filters would take each other's messages)."""
    if services.group_bindings is None:
        return
    forced = gatekeeper.forced_headers(principal)
    bound = await services.group_bindings.bind(topic.name, topic.created_at_ms, group, forced)
    if bound != forced:
        raise Forbidden(f"group {group!r} on topic {topic.name!r} is bound to another forced "
                        f"header filter than {principal.name!r}'s: use a group of its own")


async def require_own_group(services: Services, gatekeeper: Gatekeeper, principal: Principal,
                            topic: TopicMetadata, group: str, action: str) -> None:
    """403 unless ``principal`` is unfiltered or ``group`` is bound to its filter: only then does
    ``action`` on the group's state reach no other tenant's deliveries."""
    forced = gatekeeper.forced_headers(principal)
    if not forced:
        return
    bound = (None if services.group_bindings is None else
             await services.group_bindings.bound(topic.name, topic.created_at_ms, group))
    if bound != forced:
        raise Forbidden(f"{principal.name!r} works through a forced header filter; {action} is "
                        f"allowed only on a group its own filter's members joined, and group "
                        f"{group!r} on topic {topic.name!r} is not one")


def key_space(forced: Mapping[str, str]) -> bytes:
    """The key space of a principal reading and writing through ``forced`` headers: its
    ``name=value`` pairs in name order, joined by the unit separator; empty for an unfiltered
    principal. Names hold no ``=``; values are JSON-escaped, so they hold no control byte and no
    two filters share a space."""
    return b"\x1f".join(b"%s=%s" % (name.encode(), orjson.dumps(value)[1:-1])
                         for name, value in sorted(forced.items()))


def key_space_of(gatekeeper: Gatekeeper, principal: Principal, topic: TopicMetadata,
                 action: str) -> bytes:
    """The key space ``principal``'s ``action`` reaches on ``topic`` (one that keeps key state);
    409 for a filtered principal on a topic stored before key spaces, where every tenant's keys
    share one space. Decided by the topic alone: no key is consulted."""
    forced = gatekeeper.forced_headers(principal)
    if not forced:
        return b""
    if not topic.key_spaces:
        raise Problem(409, "key-spaces-required", "Key spaces required",
                      f"topic {topic.name!r} predates tenant key spaces: its keys are shared by "
                      f"every tenant, so {action} is refused to a principal with a forced header "
                      "filter; recreate the topic to give each tenant its own keys")
    return key_space(forced)


def letter_spaces(gatekeeper: Gatekeeper, principal: Principal,
                  topic: TopicMetadata) -> Callable[[Mapping[str, str]], bytes]:
    """The key space each redriven letter's key goes back to on ``topic``: a filtered caller's
    own; for an unfiltered one, its writer's tenant's, read from the forced headers it carries
    (a filtered writer's messages always carry them)."""
    if not (topic.key_index and topic.key_spaces):
        return lambda headers: b""
    forced = gatekeeper.forced_headers(principal)
    if forced:
        own = key_space(forced)
        return lambda headers: own
    names = gatekeeper.forced_header_names()
    return lambda headers: key_space({name: headers[name] for name in names if name in headers})
