"""The chart's KEDA example (``examples/keda-scaledobject.yaml``, not a template): a ScaledObject
whose metrics-api trigger reads the gateway's scale hint route, through the chart's Service, at
the value the route answers with."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import yaml
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from helm_render import CHART_DIR

from gateway.duties.scale import Hint
from gateway.routes import group_scale

EXAMPLE = CHART_DIR / "examples" / "keda-scaledobject.yaml"


def documents() -> dict[str, dict[str, Any]]:
    """The example's objects by kind."""
    return {doc["kind"]: doc for doc in yaml.safe_load_all(EXAMPLE.read_text())}


def trigger() -> dict[str, Any]:
    (only,) = documents()["ScaledObject"]["spec"]["triggers"]
    return dict(only)


def test_example_is_a_scaled_object_with_its_authentication() -> None:
    found = documents()
    assert set(found) == {"Secret", "TriggerAuthentication", "ScaledObject"}
    scaled = found["ScaledObject"]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"]["name"]
    auth = found["TriggerAuthentication"]
    assert trigger()["authenticationRef"]["name"] == auth["metadata"]["name"]
    (ref,) = auth["spec"]["secretTargetRef"]
    assert ref["name"] == found["Secret"]["metadata"]["name"]
    assert ref["key"] in found["Secret"]["stringData"]


def test_trigger_asks_for_as_many_replicas_as_the_hint_says() -> None:
    found = trigger()
    assert found["type"] == "metrics-api"
    # AverageValue with a target of 1: replicas = the value (Value would scale the current count)
    assert found["metricType"] == "AverageValue"
    assert found["metadata"]["targetValue"] == "1"
    assert found["metadata"]["format"] == "json"
    hint = Hint(3, 1, 6.0, 5.0, 40, 60.0).to_dict()
    assert hint[found["metadata"]["valueLocation"]] == 3


def test_trigger_url_is_the_scale_route_on_the_gateway_service() -> None:
    url = urlsplit(trigger()["metadata"]["url"])
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert url.hostname is not None
    assert url.hostname.split(".")[2:] == ["svc", "cluster", "local"]
    assert (url.port or 80) == values["service"]["port"]
    assert trigger()["metadata"]["keyParamName"] == "X-API-Key"


async def test_trigger_url_resolves_to_the_scale_handler_with_a_valid_query() -> None:
    url = urlsplit(trigger()["metadata"]["url"])
    app = web.Application()
    group_scale.add_routes(app)
    request = make_mocked_request("GET", f"{url.path}?{url.query}", app=app)
    match = await app.router.resolve(request)
    assert match.route.handler is group_scale.group_scale
    assert match["group"] == "billing"
    assert request.query["topic"] == "orders"
    ask = group_scale.ScaleAsk.of(request)
    assert (ask.target_drain_s, ask.min_members) == (60.0, 1)
