"""Health, readiness, metrics and the OpenAPI document."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp.test_utils import TestClient

from gateway.app import build_app
from gateway.routes.health import openapi_document
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]


async def test_healthz_answers_ok(client: Client) -> None:
    response = await client.get("/healthz")
    assert response.status == 200
    assert await response.json() == {"status": "ok"}


async def test_readyz_is_503_with_retry_after_when_redis_is_down(
    client: Client, store: Any
) -> None:
    assert (await client.get("/readyz")).status == 200
    store.unavailable = True
    response = await client.get("/readyz")
    assert response.status == 503
    assert "Retry-After" in response.headers
    assert (await response.json())["checks"]["redis"].startswith("failed")


async def test_metrics_are_prometheus_text(client: Client) -> None:
    response = await client.get("/metrics")
    assert response.status == 200
    assert "streamgate_build_info" in await response.text()


async def test_openapi_is_served(client: Client) -> None:
    response = await client.get("/openapi.json")
    assert response.status == 200
    assert (await response.json())["openapi"].startswith("3.")


def app_operations() -> set[tuple[str, str]]:
    app = build_app(GatewaySettings(auth_mode="none"))
    operations = set()
    for route in app.router.routes():
        if route.method == "HEAD" or route.resource is None:
            continue
        operations.add((route.resource.canonical, route.method.lower()))
    return operations


def documented_operations() -> set[tuple[str, str]]:
    paths = json.loads(openapi_document())["paths"]
    return {
        (path, method) for path, item in paths.items() for method in item if method != "parameters"
    }


def test_openapi_documents_exactly_the_routes_the_app_serves() -> None:
    assert documented_operations() == app_operations()


def test_every_openapi_path_parameter_is_declared() -> None:
    paths = json.loads(openapi_document())["paths"]
    for path, item in paths.items():
        declared = {p["name"] for p in item.get("parameters", []) if p["in"] == "path"}
        assert set(re.findall(r"{(\w+)}", path)) == declared, path


PUBLIC_PATHS = {"/healthz", "/readyz", "/metrics", "/openapi.json", "/asyncapi.json", "/console",
                "/console/{path}"}
# answered to every authenticated principal about itself: nothing to forbid
OWN_ONLY_PATHS = {"/v1/quotas"}


def test_every_protected_operation_documents_401_and_403() -> None:
    document = json.loads(openapi_document())
    assert set(document["components"]["securitySchemes"]) == {"bearerJwt", "apiKey"}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method == "parameters" or path in PUBLIC_PATHS:
                continue
            expected = {"401"} if path in OWN_ONLY_PATHS else {"401", "403"}
            assert expected <= set(operation["responses"]), (path, method)
