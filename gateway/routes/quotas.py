"""``GET /v1/quotas``: the caller's quota subject, its caps and what it holds across gateways."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.auth.gatekeeper import principal_of
from gateway.auth.quotas import QuotaSubject
from gateway.responses import json_response
from gateway.routes.admission import admit_or_refuse
from gateway.services import Services, services_of
from gateway.throttle import RateAction


async def describe_quotas(request: web.Request) -> web.Response:
    """GET /v1/quotas -> the caller's subject (``principal:<name>`` or ``tenant:<name>``) and, per
    quota, its cap and use (both null where it has no cap: nothing is counted).

    Any authenticated principal reads its own, never another's; charged to its reads bucket."""
    services, principal = services_of(request), principal_of(request)
    limited = await admit_or_refuse(services, principal, RateAction.READ)
    subject = services.quota_rules.subject_for(principal)
    return json_response({"subject": subject.name,
                          "quotas": {"retained_bytes": await _retained(services, subject),
                                     "in_flight_messages": await _in_flight(services, subject)}},
                         headers=limited)


async def _retained(services: Services, subject: QuotaSubject) -> dict[str, Any]:
    quota = services.retained_quota
    used = None if quota is None else await quota.used(subject)
    return {"limit": subject.retained_bytes, "used": used}


async def _in_flight(services: Services, subject: QuotaSubject) -> dict[str, Any]:
    quota = services.in_flight_quota
    window = None if quota is None else await quota.known_window(subject)
    return {"limit": subject.in_flight_messages, "used": None if window is None else window.used}


def add_routes(app: web.Application) -> None:
    """Register the quotas route."""
    app.router.add_get("/v1/quotas", describe_quotas)
