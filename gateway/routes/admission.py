"""Charging a read or a new subscription to its principal's rate limit, before anything is read.

Publish charges messages and bytes in ``routes.messages``; this is the one-request-one-unit side:
replay and pull (``read``) and WebSocket subscriptions (``subscribe``). Every refusal is counted in
``streamgate_ratelimit_refused_total{action,limit}``.
"""

from __future__ import annotations

from gateway.auth.principal import Principal
from gateway.errors import Problem, rate_limited
from gateway.services import Services
from gateway.throttle import RateAction, ThrottleDecision

ADMITTED = ThrottleDecision(True, 0, {})


async def admit(services: Services, principal: Principal, action: RateAction) -> ThrottleDecision:
    """Charge one ``read`` or ``subscribe`` of ``principal``; a refusal is counted, not raised."""
    throttle = services.throttle
    if throttle is None:
        return ADMITTED
    if action is RateAction.READ:
        decision = await throttle.admit_read(principal)
    elif action is RateAction.SUBSCRIBE:
        decision = await throttle.admit_subscribe(principal)
    else:
        raise ValueError(f"{action} is charged per message, not per request")
    if not decision.allowed:
        services.metrics.ratelimit_refused.labels(action.value, decision.limit).inc()
    return decision


def refusal(decision: ThrottleDecision) -> Problem:
    """The 429 problem (Retry-After, RateLimit, RateLimit-Policy) for a refused decision."""
    return rate_limited(decision.reason, decision.retry_after_s, dict(decision.headers))


async def admit_group(services: Services, principal: Principal, topic: str, group: str) -> None:
    """Charge a group ``principal`` would create to its ``max_groups_per_principal`` (403
    groups-limit past it); joining an existing group is free. Call before the group is created
    (subscribe, pull)."""
    if services.group_quota is not None:
        await services.group_quota.admit(principal.name, topic, group)


async def admit_or_refuse(services: Services, principal: Principal,
                          action: RateAction) -> dict[str, str]:
    """Charge one request; 429 when refused, else the RateLimit headers to send with the
    response."""
    decision = await admit(services, principal, action)
    if not decision.allowed:
        raise refusal(decision)
    return dict(decision.headers)
