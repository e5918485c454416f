"""Groups and forced header filters: every member of a group reads through one filter, and a
filtered principal administers only groups bound to its own filter (docs/security.md)."""

from __future__ import annotations

from gateway.auth.errors import Forbidden
from gateway.auth.gatekeeper import Gatekeeper
from gateway.auth.principal import Principal
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
