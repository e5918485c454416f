"""Liveness, readiness, metrics and the API descriptions (OpenAPI for HTTP, AsyncAPI for the
WebSocket protocol)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from importlib import resources

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.observe.exposition import RedactedMetrics
from gateway.responses import json_response
from gateway.services import Services, services_of

READINESS_TIMEOUT_S = 2.0
# shipped as package data, each served at /<name>; public (gateway.auth.gatekeeper)
API_DOCUMENTS = ("openapi.json", "asyncapi.json")


async def healthz(request: web.Request) -> web.Response:
    """GET /healthz: the process is alive and serving."""
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """GET /readyz: 200 when every backend check passes, else 503 naming the failing ones."""
    services = services_of(request)
    checks: dict[str, str] = {}
    for name, check in services.readiness_checks:
        try:
            await asyncio.wait_for(check(), READINESS_TIMEOUT_S)
            checks[name] = "ok"
        except Exception as exc:
            checks[name] = f"failed: {exc}" if str(exc) else f"failed: {type(exc).__name__}"
    ready = all(state == "ok" for state in checks.values())
    headers = None if ready else {"Retry-After": str(services.settings.retry_after_s)}
    return json_response({"status": "ready" if ready else "not ready", "checks": checks},
                         status=200 if ready else 503, headers=headers)


async def metrics(request: web.Request) -> web.Response:
    """GET /metrics: Prometheus text exposition of this process's registry."""
    services = services_of(request)
    services.metrics.topics_cached.set(len(services.cache.all()))
    export_heat(services)
    settings = services.settings
    shown = RedactedMetrics(services.metrics.registry, expose_keys=settings.metrics_expose_keys,
                            expose_groups=settings.metrics_expose_groups)
    response = web.Response(body=generate_latest(shown))
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


def export_heat(services: Services) -> None:
    """Refresh the per-partition rate, hot flag and (when exposed) heavy-key gauges from this
    gateway's statistics."""
    metrics = services.metrics
    metrics.partition_top_key_messages.clear()
    for topic in services.cache.all():
        for heat in services.stats.heat(topic.name, topic.partitions, top=3):
            labels = (topic.name, str(heat.partition))
            metrics.partition_publish_rate.labels(*labels).set(heat.rate_per_s)
            metrics.partition_hot.labels(*labels).set(1 if heat.hot else 0)
            for key, count in heat.top_keys if services.settings.metrics_expose_keys else ():
                metrics.partition_top_key_messages.labels(*labels, key).set(count)


def api_document(name: str) -> bytes:
    """One of the API_DOCUMENTS shipped in the package."""
    return resources.files("gateway").joinpath(name).read_bytes()


def openapi_document() -> bytes:
    """The OpenAPI document (HTTP routes)."""
    return api_document("openapi.json")


def document_route(name: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The handler of ``GET /<name>``: the document as shipped."""
    async def serve_document(request: web.Request) -> web.Response:
        return web.Response(body=api_document(name), content_type="application/json")
    return serve_document


def add_routes(app: web.Application) -> None:
    """Register the operational routes."""
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    for name in API_DOCUMENTS:
        app.router.add_get(f"/{name}", document_route(name))
